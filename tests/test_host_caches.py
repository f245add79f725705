"""The runner's own time per job: problems and their references kept between jobs (bounded by
bytes), one pass over the output for the written-and-finite check, one download of the output
per checked launch, and the inspection made beside the check. CPU only, but for one GPU test of
the CUDA backend's own poison and compare kernels."""

import time

import numpy as np
import pytest
from conftest import compose_config, requires_cuda_gpu

from runner.backends.base import POISON, POISON_BITS
from runner.config.schema import Operation
from runner.config.spec import ProblemSize, plan_kernel
from runner.errors import Refused, VerificationError
from runner.record import names
from runner.run import execute as execute_module
from runner.run import operations
from runner.run.execute import checked_launch, execute, prepare
from runner.run.operations import (
    ProblemCache,
    check_exact,
    check_sgemm,
    clear_caches,
    draw_problem,
    effective_check,
    make_problem,
    never_written,
    not_finite,
    problem_cache_limit,
)

# A kernel-major sweep's shapes, small: each one's problem differs from the one before.
SHAPES = [ProblemSize(24, 24, 24), ProblemSize(40, 40, 40), ProblemSize(56, 56, 56),
          ProblemSize(41, 39, 37), ProblemSize(33, 35, 31)]


@pytest.fixture(autouse=True)
def fresh_caches():
    clear_caches()
    yield
    clear_caches()


def _old_draw(size: ProblemSize, seed: int, initial: bool = False) -> dict:
    """The inputs as make_problem drew them before: uniform(-1, 1) float64 cast to float32."""
    rng = np.random.default_rng(seed)

    def draw(rows, cols):
        return rng.uniform(-1.0, 1.0, size=(rows, cols)).astype(np.float32)

    drawn = {"A": draw(size.M, size.K), "B": draw(size.K, size.N)}
    if initial:
        drawn["C"] = draw(size.M, size.N)
    return drawn


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint32)


@pytest.mark.parametrize("size", [ProblemSize(1, 1, 1), ProblemSize(3, 5, 7),
                                  ProblemSize(300, 257, 263), ProblemSize(129, 1000, 517)])
def test_the_draw_gives_the_same_bits_as_before(size):
    """Drawn a block at a time with no float64 copy of the whole matrix, bit for bit the values
    uniform(-1, 1).astype(float32) gave, C0 after A and B as before."""
    old = _old_draw(size, 11, initial=True)
    new = draw_problem(Operation.sgemm, size, 11, initial_output=True)
    for name, array in (("A", new.inputs["A"]), ("B", new.inputs["B"]), ("C", new.initial["C"])):
        assert array.dtype == np.float32 and array.flags.c_contiguous
        assert array.shape == old[name].shape
        assert np.array_equal(_bits(array), _bits(old[name])), name
    copy = draw_problem(Operation.transpose, ProblemSize(70, 90, 1), 3)
    rng = np.random.default_rng(3)
    assert np.array_equal(_bits(copy.inputs["src"]),
                          _bits(rng.uniform(-1.0, 1.0, size=(70, 90)).astype(np.float32)))
    assert copy.output_shape == (90, 70)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_a_draw_split_between_threads_gives_the_same_bits(monkeypatch, threads):
    """Large draws go to threads, each from the stream advanced to its span: forced here on
    small shapes (spans of one block and less, the last one short), bit for bit as before."""
    monkeypatch.setattr(operations, "_PARALLEL_DRAW_MIN", 1)
    monkeypatch.setattr(operations, "_DRAW_BLOCK", 1000)
    monkeypatch.setattr(operations, "_draw_threads", lambda: threads)
    size = ProblemSize(301, 257, 263)
    old = _old_draw(size, 5, initial=True)
    new = draw_problem(Operation.sgemm, size, 5, initial_output=True)
    for name, array in (("A", new.inputs["A"]), ("B", new.inputs["B"]), ("C", new.initial["C"])):
        assert np.array_equal(_bits(array), _bits(old[name])), name


def test_a_kernel_major_sweep_draws_each_shape_once():
    """Five shapes in turn, again and again (kernel by kernel): the same arrays each time."""
    first = {size: make_problem(Operation.sgemm, size, 0) for size in SHAPES}
    for _ in range(3):
        for size in SHAPES:
            again = make_problem(Operation.sgemm, size, 0)
            assert again is first[size]
            assert again.inputs["A"] is first[size].inputs["A"]
            assert again.inputs["B"] is first[size].inputs["B"]
    # another seed, beta != 0 (C0), another operation: problems of their own
    assert make_problem(Operation.sgemm, SHAPES[0], 1) is not first[SHAPES[0]]
    with_c0 = make_problem(Operation.sgemm, SHAPES[0], 0, True)
    assert with_c0 is not first[SHAPES[0]] and "C" in with_c0.initial
    assert np.array_equal(with_c0.inputs["A"], first[SHAPES[0]].inputs["A"])
    assert make_problem(Operation.sgemm, SHAPES[0], 0, True) is with_c0
    assert make_problem(Operation.copy, SHAPES[1], 0).operation is Operation.copy


def test_eviction_keeps_what_fits_and_always_the_newest(monkeypatch):
    limit = [10_000]
    kept = ProblemCache(limit=lambda held: limit[0])
    monkeypatch.setattr(operations, "_problems", kept)
    small = [ProblemSize(10, 10, 10 + i) for i in range(4)]  # 80 * (10 + i) bytes: 3,680 in all
    first = [make_problem(Operation.sgemm, s, 0) for s in small]
    assert len(kept) == 4 and kept.nbytes == sum(
        a.nbytes for p in first for a in p.inputs.values())
    big = make_problem(Operation.sgemm, ProblemSize(40, 40, 40), 0)  # 12,800 bytes: over
    assert len(kept) == 1 and ProblemSize(40, 40, 40) in {key[1] for key in kept._kept}
    assert make_problem(Operation.sgemm, ProblemSize(40, 40, 40), 0) is big  # kept
    assert make_problem(Operation.sgemm, small[0], 0) is not first[0]  # drawn again
    assert len(kept) == 1  # the big one went: the two together exceed the limit
    limit[0] = 4_000  # room for four small ones, not five: the least recently used goes
    for s in small:
        make_problem(Operation.sgemm, s, 0)
    make_problem(Operation.sgemm, small[1], 0)  # used again: now the newest
    make_problem(Operation.sgemm, ProblemSize(10, 10, 9), 0)
    keys = [key[1] for key in kept._kept]
    assert keys == [small[2], small[3], small[1], ProblemSize(10, 10, 9)]
    assert kept.nbytes <= 4_000


def test_the_default_limit_is_2_gib_or_a_quarter_of_the_available_memory(monkeypatch):
    import psutil

    class Memory:
        available = 40 << 30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory)
    assert problem_cache_limit() == 2 << 30
    Memory.available = 4 << 30
    assert problem_cache_limit() == 1 << 30
    assert problem_cache_limit(held=4 << 30) == 2 << 30  # what the cache holds counts as free


def test_references_are_kept_with_every_cached_problem():
    """Five problems in turn, checked again and again: each one's float64 reference is
    computed once and kept with its problem (it was kept for the last two pairs only)."""
    results = {}
    for round_ in range(3):
        for size in SHAPES:
            problem = make_problem(Operation.sgemm, size, 0)
            A, B = problem.inputs["A"], problem.inputs["B"]
            C = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
            for full in (True, False):
                entry = operations._float64_reference(A, B, full, 8, 8, 0)
                if round_ == 0:
                    results[size, full] = entry
                else:  # the very same arrays: not computed again
                    assert all(x is y for x, y in zip(entry, results[size, full]))
                assert check_sgemm(A, B, C, 1e-5, 1 << 30 if full else 1, 8, 8, 0).passed
            kept = operations._problems.owner(A, B)
            assert kept is not None and kept.problem is problem
            assert len(kept.references) == 2
    assert not operations._references  # nothing kept outside the problems' own entries


def test_a_reference_goes_with_its_problem(monkeypatch):
    kept = ProblemCache(limit=lambda held: 40_000)
    monkeypatch.setattr(operations, "_problems", kept)
    problem = make_problem(Operation.sgemm, ProblemSize(30, 30, 30), 0)  # 7,200 bytes
    operations._float64_reference(problem.inputs["A"], problem.inputs["B"], True, 8, 8, 0)
    assert kept.nbytes == 7_200 + 30 * 30 * 8  # the float64 product counted with it
    make_problem(Operation.sgemm, ProblemSize(60, 60, 60), 0)  # 28,800 bytes: the first goes
    assert len(kept) == 1 and kept.owner(problem.inputs["A"], problem.inputs["B"]) is None


def test_arrays_of_no_cached_problem_still_get_a_reference():
    rng = np.random.default_rng(5)
    A = rng.uniform(-1, 1, (20, 30)).astype(np.float32)
    B = rng.uniform(-1, 1, (30, 10)).astype(np.float32)
    first = operations._float64_reference(A, B, True, 8, 8, 0)
    assert operations._float64_reference(A, B, True, 8, 8, 0)[2] is first[2]
    assert check_sgemm(A, B, (A @ B).astype(np.float32), 1e-5, 1 << 30, 8, 8, 0).passed


def _product(size: ProblemSize, seed: int = 0):
    problem = make_problem(Operation.sgemm, size, seed)
    A, B = problem.inputs["A"], problem.inputs["B"]
    return A, B, (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("full", [True, False])
def test_the_one_pass_check_finds_what_the_separate_passes_found(full):
    """NaN, Inf and the poison anywhere, in the last block of the pass too, and never in
    the sampled rows or columns: the same verdicts and the same words as before."""
    size = ProblemSize(700, 600, 50)  # 420,000 elements: two blocks of the pass
    A, B, right = _product(size)
    macs = 1 << 40 if full else 1
    assert check_sgemm(A, B, right, 1e-5, macs, 4, 4, 0).passed
    rows, cols = operations._float64_reference(A, B, full, 4, 4, 0)[:2]
    spare_row = next(r for r in range(size.M - 1, 0, -1) if rows is None or r not in rows)
    spare_col = next(c for c in range(size.N - 1, 0, -1) if cols is None or c not in cols)
    for bad in (np.nan, np.inf, -np.inf):
        C = right.copy()
        C[spare_row, spare_col] = bad
        checked = check_sgemm(A, B, C, 1e-5, macs, 4, 4, 0)
        assert not checked.passed and checked.method == "written and finite"
        assert checked.detail == not_finite(C)
    C = right.copy()
    C[spare_row, spare_col] = POISON
    checked = check_sgemm(A, B, C, 1e-5, macs, 4, 4, 0)
    assert not checked.passed and checked.rel_error != checked.rel_error  # NaN: unwritten
    assert checked.detail.startswith("1 of 420000 output elements were never written (first at "
                                     f"[{spare_row}, {spare_col}]")
    assert checked.detail == operations._unwritten(never_written(C))
    C = right.copy()
    C[:, :] *= 1.01  # wrong everywhere, and a poisoned element besides
    C[spare_row, spare_col] = POISON
    checked = check_sgemm(A, B, C, 1e-5, macs, 4, 4, 0)
    assert "exceeds the tolerance" in checked.detail
    assert checked.detail.endswith(operations._unwritten(never_written(C)))


def test_the_relative_error_is_what_it_was():
    """Sampled and full, with alpha and beta: the figure recorded as check.rel_error is
    computed from the same arrays as before (np.where over the whole never-written mask)."""
    size = ProblemSize(90, 70, 50)
    problem = make_problem(Operation.sgemm, size, 4, True)
    A, B, C0 = problem.inputs["A"], problem.inputs["B"], problem.initial["C"]
    C = (0.5 * (A.astype(np.float64) @ B.astype(np.float64)) - 0.25 * C0).astype(np.float32)
    C[3, 4] += 1e-3
    for macs in (1 << 40, 1):
        full = macs > 1
        rows, cols, ref, ref_rows, ref_cols = operations._float64_reference(A, B, full, 5, 5, 4)
        never = never_written(C)
        if full:
            reference = 0.5 * ref - 0.25 * C0.astype(np.float64)
            written = np.where(never, reference, C)
            expected = np.linalg.norm(written - reference) / np.linalg.norm(reference)
        else:
            ref_rows = 0.5 * ref_rows - 0.25 * C0[rows].astype(np.float64)
            ref_cols = 0.5 * ref_cols - 0.25 * C0[:, cols].astype(np.float64)
            diff = (np.linalg.norm(np.where(never[rows], ref_rows, C[rows]) - ref_rows) ** 2
                    + np.linalg.norm(np.where(never[:, cols], ref_cols, C[:, cols]) - ref_cols)
                    ** 2)
            expected = np.sqrt(diff / (np.linalg.norm(ref_rows) ** 2
                                       + np.linalg.norm(ref_cols) ** 2))
        checked = check_sgemm(A, B, C, 1.0, macs, 5, 5, 4, 0.5, -0.25, C0)
        assert checked.rel_error == float(expected)


def test_a_transpose_is_compared_without_a_copy_and_still_bit_for_bit():
    source = np.random.default_rng(1).uniform(-1, 1, (300, 1100)).astype(np.float32)
    right = np.ascontiguousarray(source.T)
    assert check_exact(source.T, right).passed
    wrong = right.copy()
    wrong[1099, 299] = np.float32(-0.0) if right[1099, 299] == 0 else -right[1099, 299]
    checked = check_exact(source.T, wrong)
    assert not checked.passed and checked.detail.startswith("1 of 330000 elements differ "
                                                            "(first at [1099, 299]")
    unwritten = right.copy()
    unwritten.view(np.uint32)[500, 7] = POISON_BITS
    checked = check_exact(source.T, unwritten)
    assert not checked.passed and "never written" in checked.detail
    zero = np.zeros((4, 4), np.float32)
    negative_zero = np.full((4, 4), -0.0, np.float32)  # equal as floats, not as bits
    assert not check_exact(zero, negative_zero).passed


@pytest.mark.parametrize("on_device", [True, False])
def test_a_checked_launch_downloads_its_output_once_and_large_inputs_only_their_guards(
        cpu_backend, monkeypatch, on_device):
    from runner.run import guards

    if on_device:  # as if A and B were large: compared on the device
        monkeypatch.setattr(guards, "DEVICE_COMPARE_MIN_FLOATS", 0)
    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2")
    plan = plan_kernel(cfg.kernel, ProblemSize(64, 48, 32))
    problem = make_problem(plan.operation, plan.size, 0)
    prepared = prepare(cpu_backend, cfg.kernel.sources, plan, problem)
    downloads, ranges = [], []

    class Counting:
        def __getattr__(self, name):
            return getattr(cpu_backend, name)

        def download(self, buffer, shape):
            downloads.append(shape)
            return cpu_backend.download(buffer, shape)

        def download_range(self, buffer, offset, count):
            ranges.append(count)
            return cpu_backend.download_range(buffer, offset, count)

    checked = checked_launch(Counting(), prepared, problem, effective_check(cfg), 0)
    assert checked.passed and checked.launch_ms is not None
    whole = {name: (guarded.guard * 2 + guarded.count,)
             for name, guarded in prepared.guarded.items()}
    if on_device:
        assert downloads == [whole["C"]]  # C whole, once; A and B compared on the device
        sizes = [prepared.guarded[name].guard for name in ("A", "B") for _ in range(2)]
        assert sorted(ranges) == sorted(sizes)
    else:  # small inputs come back whole, each once, as C does
        assert sorted(downloads) == sorted(whole.values()) and not ranges
    # a write past the end of C is still caught, from the same single download
    output = prepared.guarded["C"]
    bits = cpu_backend.download(output.whole, whole["C"]).view(np.uint32).copy()
    bits[output.guard + output.count] = 0
    original = cpu_backend.download

    def corrupted(buffer, shape):
        if buffer is output.whole:
            return bits.view(np.float32).copy()
        return original(buffer, shape)

    Counting.download = lambda self, buffer, shape: corrupted(buffer, shape)
    with pytest.raises(VerificationError, match="past the end of C"):
        checked_launch(Counting(), prepared, problem, effective_check(cfg), 0)


class Recorder:
    def __init__(self):
        self.texts, self.order = {}, []

    def text(self, text, name):
        self.texts[name] = text
        self.order.append(name)

    def metrics(self, values):
        pass

    def tags(self, values):
        pass


def _cpu_run(*overrides):
    from runner.backends import make_backend

    cfg = compose_config("backend.device_type=cpu", "kernel=matmul_2", "timing.repeats=3",
                         "timing.warmup=1", *overrides)
    plan = plan_kernel(cfg.kernel, ProblemSize(32, 32, 32))
    return cfg, make_backend(cfg.backend), plan


def test_the_inspection_is_made_beside_the_check_and_recorded_before_the_timing(monkeypatch):
    cfg, backend, plan = _cpu_run("tracking.inspect=true")
    execute_module._inspections.pop(backend, None)
    phases, recorder = [], Recorder()
    threads = []
    real = execute_module.inspect_once

    def inspect(*args):
        import threading

        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(execute_module, "inspect_once", inspect)
    outcome = execute(cfg, backend, plan, recorder, on_phase=phases.append)
    assert outcome.check.passed
    assert phases.index("compile") < phases.index("check") < phases.index("inspect") \
        < phases.index("time")
    import threading

    assert threads and threads[0] is not threading.main_thread()
    assert {"inspect/summary.md", "inspect/build_log.txt"} <= set(recorder.texts)
    assert recorder.order.index("inspect/summary.md") < recorder.order.index(
        names.SAMPLES_ARTIFACT)  # recorded before the timed samples were taken


def test_the_wait_for_the_inspection_is_not_counted_as_the_kernels_own_work(monkeypatch):
    """time_s/kernel_work is what a sweep takes from its wall to print the runner's own time:
    a job that waits for its SASS waits for the runner."""
    cfg, backend, plan = _cpu_run("tracking.inspect=true")
    execute_module._inspections.pop(backend, None)

    def slow(*args):
        time.sleep(2.0)
        return {"summary.md": "late\n"}

    recorded = {}

    class Metrics(Recorder):
        def metrics(self, values):
            recorded.update(values)

    monkeypatch.setattr(execute_module, "inspect_once", slow)
    started = time.perf_counter()
    assert execute(cfg, backend, plan, Metrics()).check.passed
    assert time.perf_counter() - started >= 2.0
    assert 0 < recorded[names.KERNEL_WORK_S] < 1.5


def test_an_inspection_that_fails_in_its_thread_is_a_note_not_a_lost_error(monkeypatch):
    cfg, backend, plan = _cpu_run("tracking.inspect=true")

    def broken(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(execute_module, "inspect_once", broken)
    recorder = Recorder()
    assert execute(cfg, backend, plan, recorder).check.passed
    assert "OSError: disk gone" in recorder.texts["inspect/summary.md"]


def test_a_failed_run_records_an_inspection_that_is_ready_and_does_not_wait_long(monkeypatch):
    import threading

    cfg, backend, plan = _cpu_run("tracking.inspect=true")
    release = threading.Event()

    def slow(*args):
        release.wait(30)
        return {"summary.md": "late\n"}

    def failing_launch(*args, **kwargs):
        raise VerificationError("wrong")

    monkeypatch.setattr(execute_module, "checked_launch", failing_launch)
    monkeypatch.setattr(execute_module, "INSPECT_GRACE_ON_FAILURE_S", 0.2)
    monkeypatch.setattr(execute_module, "inspect_once", slow)
    recorder, phases = Recorder(), []
    import time

    started = time.perf_counter()
    with pytest.raises(VerificationError, match="wrong"):
        execute(cfg, backend, plan, recorder, on_phase=phases.append)
    assert time.perf_counter() - started < 10
    assert "inspect/summary.md" not in recorder.texts  # dropped: not ready in time
    release.set()

    monkeypatch.setattr(execute_module, "inspect_once", lambda *args: {"summary.md": "ready\n"})
    recorder = Recorder()
    with pytest.raises(VerificationError, match="wrong"):
        execute(cfg, backend, plan, recorder)
    assert recorder.texts["inspect/summary.md"] == "ready\n"  # a failed run keeps it


def test_no_inspection_when_tracking_inspect_is_off(monkeypatch):
    cfg, backend, plan = _cpu_run("tracking.inspect=false")
    monkeypatch.setattr(execute_module, "inspect_once",
                        lambda *args: pytest.fail("inspected with tracking.inspect=false"))
    phases, recorder = [], Recorder()
    assert execute(cfg, backend, plan, recorder, on_phase=phases.append).check.passed
    assert "inspect" not in phases and not any(n.startswith("inspect/") for n in recorder.texts)


def test_kept_problems_give_way_before_a_run_is_refused_for_host_memory(monkeypatch):
    """A size refused for host memory is refused only if the memory is short with the earlier
    jobs' kept problems let go."""
    cfg, backend, plan = _cpu_run("tracking.inspect=false")
    make_problem(Operation.sgemm, ProblemSize(64, 64, 64), 0)  # an earlier job's
    checked = []

    def short_while_kept(plan, floats):
        checked.append(len(operations._problems))
        if len(operations._problems):
            raise Refused("short")

    monkeypatch.setattr(execute_module, "check_host_memory", short_while_kept)
    assert execute(cfg, backend, plan, Recorder()).check.passed
    assert checked == [1, 0]

    def always_short(plan, floats):
        raise Refused("short")

    monkeypatch.setattr(execute_module, "check_host_memory", always_short)
    with pytest.raises(Refused, match="short"):
        execute(cfg, backend, plan, Recorder())


def test_cuda_compares_every_input_on_the_device_opencl_only_large_ones(cpu_backend):
    from types import SimpleNamespace

    from runner.backends.cuda import CUDABackend
    from runner.run.guards import DEVICE_COMPARE_MIN_FLOATS, compared_on_device

    assert not compared_on_device(cpu_backend, 1000, 16384)
    assert compared_on_device(cpu_backend, DEVICE_COMPARE_MIN_FLOATS, 16384)
    assert CUDABackend.compares_small_inputs
    cuda_like = SimpleNamespace(compares_small_inputs=CUDABackend.compares_small_inputs)
    assert compared_on_device(cuda_like, 1000, 16384)
    assert not compared_on_device(cuda_like, 1000, 0)  # under a sanitizer: bare buffers


def test_an_input_is_compared_on_the_device_and_a_change_is_still_placed(cpu_backend,
                                                                          monkeypatch):
    from runner.run import guards
    from runner.run.guards import guarded_upload, violation

    monkeypatch.setattr(guards, "DEVICE_COMPARE_MIN_FLOATS", 5000)
    assert guarded_upload(cpu_backend, np.zeros(4999, np.float32), 100).pristine is None
    values = np.arange(5000, dtype=np.float32).reshape(50, 100)
    guarded = guarded_upload(cpu_backend, values, 100)
    assert guarded.pristine is not None
    assert violation(cpu_backend, "A", guarded) is None
    changed = values.copy()
    changed[3, 7] = -1.0  # written into the input, as a kernel could
    cpu_backend.device_copy(guarded.inner, cpu_backend.upload(changed), values.nbytes)
    assert cpu_backend.count_differences(guarded.inner, guarded.pristine, values.size) == 1
    assert violation(cpu_backend, "A", guarded) == (
        "changed input A (1 of its 5000 elements, first at element 307)")
    # the device's copy damaged (a stray write elsewhere), the input intact: judged by the host
    cpu_backend.device_copy(guarded.inner, cpu_backend.upload(values), values.nbytes)
    cpu_backend.device_copy(guarded.pristine, cpu_backend.upload(changed), values.nbytes)
    assert violation(cpu_backend, "A", guarded) is None


def _layout_of_guarded_buffers(backend):
    from runner.run.guards import SENTINEL_BITS, guarded_alloc, guarded_upload

    values = np.random.default_rng(5).standard_normal((30, 70)).astype(np.float32)
    uploaded = guarded_upload(backend, values, 70)
    bits = backend.download(uploaded.whole, (2 * uploaded.guard + values.size,)).view(np.uint32)
    guard = uploaded.guard
    assert (bits[:guard] == SENTINEL_BITS).all()
    assert (bits[guard + values.size:] == SENTINEL_BITS).all()
    assert (bits[guard:guard + values.size] == values.ravel().view(np.uint32)).all()
    output = guarded_alloc(backend, 333, 70)
    bits = backend.download(output.whole, (2 * output.guard + 333,)).view(np.uint32)
    assert (bits == SENTINEL_BITS).all()
    bare = guarded_upload(backend, values, 70, guarded=False)  # under a sanitizer
    assert bare.guard == 0 and (backend.download(bare.whole, values.shape) == values).all()


def test_guarded_buffers_are_filled_and_written_on_the_device(cpu_backend):
    """Guards of sentinels around the input's own values, an output all sentinel: made on the
    device (filled, the input written into place), as the host-padded copies were."""
    _layout_of_guarded_buffers(cpu_backend)


@pytest.mark.gpu
@requires_cuda_gpu
def test_cuda_fills_and_writes_guarded_buffers():
    from runner.backends.cuda import CUDABackend

    _layout_of_guarded_buffers(CUDABackend())


@pytest.mark.gpu
@requires_cuda_gpu
def test_cuda_poisons_and_counts_differences_with_its_own_kernels():
    """The poison and the input compare are gemmlab's plain-C kernels (no CuPy template to build
    on a host whose CuPy cache is empty): every word of a view with an offset and a size past one
    grid-stride round, differences in the head, the middle and the last word, none past count."""
    from runner.backends.cuda import CUDABackend

    backend = CUDABackend()
    count = 1024 * 256 * 3 + 37  # past the helpers' 1024 x 256 threads, not a warp multiple
    whole = backend.upload(np.zeros(count + 64, np.float32))
    view = backend.view(whole, 16, count)
    backend.poison(view)
    bits = backend.download(whole, (count + 64,)).view(np.uint32)
    assert (bits[16:16 + count] == POISON_BITS).all()
    assert not bits[:16].any() and not bits[16 + count:].any()
    values = np.random.default_rng(3).standard_normal(count).astype(np.float32)
    first = backend.upload(values)
    assert backend.count_differences(first, backend.upload(values), count) == 0
    changed = values.copy()
    changed[[0, count // 2, count - 1]] += 1.0
    changed.view(np.uint32)[5] ^= 1  # one bit of one word
    assert backend.count_differences(first, backend.upload(changed), count) == 4
    assert backend.count_differences(first, backend.upload(changed), count - 1) == 3
    nan = np.full(8, np.nan, np.float32)  # compared as bits: a NaN equals itself
    assert backend.count_differences(backend.upload(nan), backend.upload(nan), 8) == 0
