"""The compile pool of a sweep (runner/sweep/precompile.py) and the compile cache on disk
(runner/backends/nvrtc.py): a program compiled ahead by the pool is the very program the job's
own compile asks for, and a cache entry that is not whole is compiled again. No GPU needed:
NVRTC compiles for sm_90 here; the pool itself starts only where NVML sees a GPU."""

import os

import pytest
from conftest import compose_config

nvrtc_module = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

from runner.backends import nvrtc  # noqa: E402
from runner.config.spec import ProblemSize, plan_kernel  # noqa: E402
from runner.run.execute import prepare  # noqa: E402
from runner.run.operations import make_problem  # noqa: E402
from runner.sweep import precompile  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, str(tmp_path / "cache"))
    nvrtc._compile_once.cache_clear()
    yield tmp_path / "cache"
    nvrtc._compile_once.cache_clear()


def entries(folder):
    return sorted(folder.glob("[0-9a-f][0-9a-f]/*.json"))  # NVRTC outputs (sass/ apart)


@pytest.mark.parametrize("overrides", [
    ("kernel=matmul_9", "size=4096"),  # a size rule sets its tiles
    ("kernel=matmul_9", "size=1024", "kernel.params.BK=16"),
    ("kernel=matmul_4", "m=100", "n=200", "k=300"),
])
def test_the_pool_compiles_what_the_job_asks_for(cache, monkeypatch, overrides):
    cfg = compose_config("backend=cuda", *overrides)
    request = precompile.request_of(cfg, list(overrides))
    assert request is not None
    monkeypatch.setitem(precompile._capabilities, 0, 90)
    precompile._compile(request)  # what a pool process does
    assert len(entries(cache)) == 1
    nvrtc._compile_once.cache_clear()  # the job is another process: only the disk is shared

    from runner.backends.cuda import CUDABackend
    from runner.config.size_rules import apply_size_rules, pinned_params

    backend = CUDABackend(compile_only_cc=90, use_gpu=False)
    apply_size_rules(cfg, pinned_params(list(overrides)))  # as the job's run does
    plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
    called = []
    monkeypatch.setattr(nvrtc, "_nvrtc_compile", lambda *a: called.append(a))
    prepared = prepare(backend, cfg.kernel.sources, plan, make_problem(plan.operation,
                                                                      ProblemSize(1, 1, 1), 0))
    assert called == [], "the job compiled again: its request differs from the pool's"
    assert prepared.program.resources[plan.main_launch.entry].registers
    assert len(entries(cache)) == 1


def test_the_composed_config_is_left_as_the_job_gets_it():
    cfg = compose_config("backend=cuda", "kernel=matmul_9", "size=4096")
    before = dict(cfg.kernel.params)
    precompile.request_of(cfg, ["kernel=matmul_9", "size=4096"])
    assert dict(cfg.kernel.params) == before  # the job's run applies its size rule itself


def test_no_request_for_another_backend_or_a_refused_job():
    assert precompile.request_of(compose_config("kernel=matmul_4"), []) is None  # OpenCL
    refused = compose_config("backend=cuda", "kernel=matmul_4", "kernel.params.TS=7")
    assert precompile.request_of(refused, ["kernel.params.TS=7"]) is None


def test_a_cache_entry_that_is_not_whole_is_compiled_again(cache):
    source = 'extern "C" __global__ void k(int* x) { x[0] = 1; }\n'
    first = nvrtc.compile_cuda(source, "k.cu", {}, 90)
    (entry,) = entries(cache)
    entry.write_text(entry.read_text()[:100])  # cut short, as by a full disk
    nvrtc._compile_once.cache_clear()
    again = nvrtc.compile_cuda(source, "k.cu", {}, 90)
    assert again.cubin == first.cubin and again.options == first.options
    assert nvrtc._cache_read(entry) is not None  # written whole again


def test_the_cache_can_be_turned_off(cache, monkeypatch):
    monkeypatch.setenv(nvrtc.CACHE_ENV, "off")
    nvrtc.compile_cuda('extern "C" __global__ void k2(int* x) { }\n', "k2.cu", {}, 90)
    assert not cache.exists()
    assert precompile.Precompiler([None, None])._pool is None


def test_the_pool_disassembles_for_the_record_and_the_run_reads_it(cache, monkeypatch):
    from runner.inspect import program

    cfg = compose_config("backend=cuda", "kernel=matmul_4")
    request = precompile.request_of(cfg, [])
    assert request.disassemble  # tracking.inspect is on by default
    monkeypatch.setitem(precompile._capabilities, 0, 90)
    if program._sass_cache_path(b"x") is None:
        pytest.skip("no nvdisasm or cuobjdump here")
    precompile._compile(request)
    assert len(list((cache / "sass").glob("*.json"))) == 1
    output = nvrtc.compile_cuda(request.source, request.source_name, dict(request.defines), 90,
                                request.max_registers, request.include_dirs,
                                name_expressions=request.entries)
    monkeypatch.setattr(program, "_disassemble", lambda cubin: pytest.fail("disassembled again"))
    sass, how = program.disassemble(output.cubin)
    assert sass and "nvdisasm" in how or "cuobjdump" in how


def test_a_batchs_first_program_is_compiled_ahead_in_its_worker(cache, monkeypatch):
    """prepare_ahead with the first job's request (runner/run/ahead.py): into the cache the
    job reads; nothing where the cache is off (the job would compile it again anyway)."""
    from runner.run.ahead import prepare_ahead

    cfg = compose_config("backend=cuda", "kernel=matmul_4", "size=256",
                         "backend.compile_only_cc=90")
    request = precompile.request_of(cfg, [])
    monkeypatch.setitem(precompile._capabilities, 0, 90)
    prepare_ahead(cfg, request)  # its inputs need a device: skipped without one, not the compile
    assert len(entries(cache)) == 1
    monkeypatch.setenv(nvrtc.CACHE_ENV, "off")
    called = []
    monkeypatch.setattr(precompile, "_compile", lambda request: called.append(request))
    prepare_ahead(cfg, request)
    assert called == []


def test_a_pool_compile_turns_nvrtcs_own_cache_off_before_cupy_can_load_nvrtc(monkeypatch):
    """In a pool process the compute capability (CuPy, which may load NVRTC) is asked before
    the compile: NVRTC's own cache, whose hits have no ptxas report, is off before that."""
    seen = {}
    monkeypatch.delenv("CUDA_CACHE_DISABLE", raising=False)
    monkeypatch.setattr(precompile, "_compute_capability",
                        lambda device: seen.setdefault("at_capability",
                                                       os.environ.get("CUDA_CACHE_DISABLE")) and 90)
    monkeypatch.setattr(nvrtc, "compile_cuda", lambda *args, **kwargs: None)
    request = precompile.CompileRequest("", "k.cu", (), None, (), ("k",), 0)
    precompile._compile(request)
    assert seen["at_capability"] == "1"


def test_a_pool_compile_given_the_compute_capability_never_asks_cuda(monkeypatch):
    monkeypatch.setattr(precompile, "_compute_capability",
                        lambda device: pytest.fail("CUDA started for the compute capability"))
    asked = []
    monkeypatch.setattr(nvrtc, "compile_cuda", lambda *args, **kwargs: asked.append(args[3]))
    precompile._compile(precompile.CompileRequest("", "k.cu", (), None, (), ("k",), 0), 90)
    assert asked == [90]


class _FakeNVML:
    """pynvml with GPUs of the given compute capabilities (None: NVML cannot tell)."""

    class NVMLError(Exception):
        pass

    def __init__(self, capabilities):
        self.capabilities = capabilities

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.capabilities)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        if self.capabilities[handle] is None:
            raise self.NVMLError("not supported")
        return divmod(self.capabilities[handle], 10)


@pytest.mark.parametrize("capabilities, expected", [
    ([90, 90], (2, 90)),  # one H100 pool
    ([90, 80], (2, None)),  # an H100 beside an A100: each compile asks CUDA for its device
    ([90, None], (2, None)),
    ([], (0, None)),
])
def test_nvml_gives_the_pool_the_compute_capability_its_gpus_share(monkeypatch, capabilities,
                                                                    expected):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML(capabilities))
    assert precompile._nvml_gpus() == expected


def test_a_process_that_misses_the_cache_waits_for_the_compile_in_flight(cache, monkeypatch):
    """A job that starts while the pool compiles its program waits for that output instead of
    compiling it a second time (the pool's process holds the entry's lock meanwhile)."""
    import fcntl
    import threading

    cfg = compose_config("backend=cuda", "kernel=matmul_4", "size=256")
    request = precompile.request_of(cfg, [])
    compile_args = (request.source, request.source_name, dict(request.defines), 90,
                    request.max_registers, request.include_dirs)
    made = nvrtc.compile_cuda(*compile_args, name_expressions=request.entries)  # the pool's
    entry = entries(cache)[0]
    kept = entry.read_bytes()
    entry.unlink()
    nvrtc._compile_once.cache_clear()
    called = []
    monkeypatch.setattr(nvrtc, "_nvrtc_compile", lambda *a: called.append(a))

    pool_holds = open(entry.with_name(f"{entry.stem}.lock"), "a")
    fcntl.flock(pool_holds, fcntl.LOCK_EX)  # the pool's process, compiling
    got = []
    job = threading.Thread(target=lambda: got.append(
        nvrtc.compile_cuda(*compile_args, name_expressions=request.entries)))
    job.start()
    job.join(0.5)
    assert job.is_alive() and not called, "the job compiled beside the compile in flight"
    entry.write_bytes(kept)  # the pool's output lands
    pool_holds.close()  # and its lock goes
    job.join(10)
    assert not job.is_alive() and not called
    assert got[0].cubin == made.cubin and got[0].log == made.log


def test_a_compile_lock_held_too_long_is_given_up(cache, monkeypatch):
    import fcntl

    cfg = compose_config("backend=cuda", "kernel=matmul_4", "size=256")
    request = precompile.request_of(cfg, [])
    args = (request.source, request.source_name, dict(request.defines), 90,
            request.max_registers, request.include_dirs)
    nvrtc.compile_cuda(*args, name_expressions=request.entries)
    entry = entries(cache)[0]
    entry.unlink()
    nvrtc._compile_once.cache_clear()
    monkeypatch.setattr(nvrtc, "COMPILE_LOCK_WAIT_S", 0.2)
    stuck = open(entry.with_name(f"{entry.stem}.lock"), "a")
    fcntl.flock(stuck, fcntl.LOCK_EX)  # a holder that never lets go
    try:
        output = nvrtc.compile_cuda(*args, name_expressions=request.entries)
    finally:
        stuck.close()
    assert output.cubin and entries(cache) == [entry]


def _held_by_another(lock) -> bool:
    import fcntl

    with open(lock, "a") as other:  # another process's view of the lock
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True


def test_the_pool_writes_the_program_then_disassembles_it_under_the_sass_lock(cache, monkeypatch):
    """The job waiting for its program starts as soon as the entry is written; the pool holds
    the SASS's lock from before that, so the job's inspection waits for that disassembly."""
    cfg = compose_config("backend=cuda", "kernel=matmul_4", "size=256")
    request = precompile.request_of(cfg, [])
    assert request.disassemble
    from runner.inspect import program

    if program._sass_cache_path(b"x") is None:
        pytest.skip("no nvdisasm or cuobjdump here")
    seen = []

    def disassemble(cubin):
        program_lock = next(cache.glob("[0-9a-f][0-9a-f]/*.lock"))
        sass_lock = next((cache / "sass").glob("*.lock"))
        seen.append((len(entries(cache)), _held_by_another(program_lock),
                     _held_by_another(sass_lock)))
        return "SASS", "a stand-in"

    monkeypatch.setattr(program, "_disassemble", disassemble)
    precompile._compile(request, 90)
    assert seen == [(1, False, True)]  # entry written, program's lock free, SASS's lock held
    assert not _held_by_another(next((cache / "sass").glob("*.lock")))  # let go once done


def test_an_inspection_waits_for_the_disassembly_in_flight(cache, monkeypatch):
    """A job whose program's SASS the pool (or its worker's compile thread) is making reads that
    SASS instead of disassembling the program a second time beside its check."""
    import fcntl
    import threading

    from runner.inspect import program

    cubin = b"a cubin"
    path = program._sass_cache_path(cubin)
    if path is None:
        pytest.skip("no nvdisasm or cuobjdump here")
    monkeypatch.setattr(program, "_disassemble", lambda cubin: pytest.fail("disassembled again"))
    path.parent.mkdir(parents=True)
    pool_holds = open(path.with_name(f"{path.stem}.lock"), "a")
    fcntl.flock(pool_holds, fcntl.LOCK_EX)  # the pool's process, disassembling
    got = []
    job = threading.Thread(target=lambda: got.append(program.disassemble(cubin)))
    job.start()
    job.join(0.5)
    assert job.is_alive(), "the inspection did not wait for the disassembly in flight"
    nvrtc.cache_write(path, {"sass": "SASS", "how": "the pool's"})
    pool_holds.close()
    job.join(10)
    assert got == [("SASS", "the pool's")]


class _FakePool:
    def __init__(self):
        self.submitted, self.stopped = [], False

    def submit(self, function, *args):
        self.submitted.append((function, args))


def test_a_cuda_sweep_starts_the_pool_with_itself_and_its_first_batch_takes_it(cache,
                                                                               monkeypatch):
    """prestart (a sweep's start): processes started and loaded, for the batch's Precompiler,
    which compiles in them with NVML's compute capability; none for OpenCL or without a GPU."""
    import sys

    pools = []
    monkeypatch.setattr(precompile, "_new_pool", lambda: pools.append(_FakePool()) or pools[-1])
    monkeypatch.setattr(precompile, "_stop", lambda pool: setattr(pool, "stopped", True))
    monkeypatch.setattr(precompile, "_prestarted", None)
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML([]))
    precompile.prestart("cuda")
    assert pools == []  # no GPU
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML([90]))
    precompile.prestart("opencl")
    assert pools == []
    precompile.prestart("cuda")
    assert len(pools) == 1
    assert [f for f, _ in pools[0].submitted] == [precompile._loaded] * precompile.PRESTARTED

    first, second = (precompile.request_of(compose_config("backend=cuda", f"kernel={kernel}"), [])
                     for kernel in ("matmul_4", "matmul_3"))
    with precompile.Precompiler([first]) as batch:
        batch.submit(second)
        assert len(pools) == 1 and pools[0].submitted[-1] == (precompile._compile, (second, 90))
        assert precompile._prestarted is None
    assert pools[0].stopped
    precompile.prestart("cuda")  # another sweep in this process: a pool of its own
    precompile.stop_prestarted()  # which its end stops, no batch having taken it
    assert len(pools) == 2 and pools[1].stopped and precompile._prestarted is None


def test_a_prestarted_process_loads_what_a_compile_needs(cache):
    precompile._loaded()  # imports, NVRTC's version, the disassemblers: no error without a GPU


def _interrupt_handler() -> str:
    import signal

    return str(signal.getsignal(signal.SIGINT))


def test_a_pool_process_ignores_ctrl_c(monkeypatch):
    """The terminal's Ctrl-C reaches the pool's processes too: the sweep's process handles it
    and stops them; an idle one must not print a traceback meanwhile."""
    import signal

    pool = precompile._new_pool()
    try:
        assert pool.submit(_interrupt_handler).result(timeout=60) == str(signal.SIG_IGN)
    finally:
        precompile._stop(pool)
