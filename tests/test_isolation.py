"""Every job isolated and watched (issue 27), through the real command line on the CPU: a kernel
that writes past its buffer, changes an input, never returns or crashes its process costs one
run, never the sweep. The broken kernels are a user's folders (tests/broken_kernels)."""

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_bad_inputs_cli import ERROR, gemmlab, one_error_line, runs

BROKEN = Path(__file__).parent / "broken_kernels"
USER_FOLDERS = [f"kernel_dirs=[{BROKEN}]", f"hydra.searchpath=[file://{BROKEN}/conf]"]


def _store(tmp_path: Path) -> list[str]:
    return [f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"]


def _only_run(tmp_path: Path):
    (run,) = runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return run


def test_a_write_past_the_end_of_c_fails_the_run(tmp_path):
    done = gemmlab(tmp_path, "kernel=oob_1", *USER_FOLDERS, *_store(tmp_path))
    line = one_error_line(done, "oob_1 wrote 16 floats past the end of C",
                          "first at element 256", "at 16x16x16")
    run = _only_run(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_reason"] in line
    assert "perf/gflops" not in run.data.metrics  # never timed, never reported as fast


def test_a_kernel_that_changes_an_input_fails_the_run(tmp_path):
    done = gemmlab(tmp_path, "kernel=clobber_1", *USER_FOLDERS, *_store(tmp_path))
    one_error_line(done, "clobber_1 changed input A", "first at element 0")
    assert _only_run(tmp_path).info.status == "FAILED"


def test_a_kernel_that_never_returns_ends_at_its_time_limit(tmp_path):
    started = time.monotonic()
    done = gemmlab(tmp_path, "kernel=hang_1", "timing.timeout_s=2", *USER_FOLDERS,
                   *_store(tmp_path))
    one_error_line(done, "hang_1 did not finish within 2 s at 16x16x16",
                   "the kernel did not return")
    assert time.monotonic() - started < 60
    run = _only_run(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["gemmlab.status"] == "timeout"


def test_a_kernel_that_crashes_its_process_is_one_line(tmp_path):
    done = gemmlab(tmp_path, "kernel=fault_1", *USER_FOLDERS, *_store(tmp_path))
    # A CPU runtime either dies of the wild write (SIGSEGV) or reports it: one line either way.
    one_error_line(done, "fault_1")
    assert _only_run(tmp_path).info.status == "FAILED"


def test_healthy_jobs_around_broken_ones_run_and_the_sweep_closes(tmp_path):
    done = gemmlab(tmp_path, "kernel=matmul_1,oob_1,hang_1,fault_1,matmul_2",
                   "timing.timeout_s=2", *USER_FOLDERS, *_store(tmp_path),
                   prefix=("-m", "runner", "-m"))
    assert done.returncode == 1, done.stderr[-3000:]  # the sweep closed, with failed jobs
    assert "Traceback" not in done.stdout + done.stderr
    recorded = runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = [r for r in recorded if r.data.tags.get("gemmlab.sweep") == "true"]
    jobs = {r.data.params["kernel.name"]: r for r in recorded
            if r not in parent and r.data.tags.get("gemmlab.series") != "true"}
    assert [p.info.status for p in parent] == ["FINISHED"]
    assert {name: run.info.status for name, run in jobs.items()} == {
        "matmul_1": "FINISHED", "hang_1": "FAILED", "oob_1": "FAILED", "fault_1": "FAILED",
        "matmul_2": "FINISHED"}
    pids = {name: run.data.tags["job.worker_pid"] for name, run in jobs.items()}
    # One worker until a job hangs or crashes it: a clean failure (oob_1) keeps it.
    assert pids["matmul_1"] == pids["oob_1"] == pids["hang_1"]
    assert len({pids["hang_1"], pids["fault_1"], pids["matmul_2"]}) == 3
    assert "5/5 jobs" in done.stdout and "1 timed out" in done.stdout


def _children(pid: int) -> list[int]:
    """The job worker processes `pid` started (not, say, the git it asks for the commit)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"runner.job.worker" in command:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_a_hung_run_within_two_seconds(tmp_path, signum, code):
    command = [sys.executable, "-m", "runner", "backend.device_type=cpu", "size=16",
               "kernel=hang_1", *USER_FOLDERS, *_store(tmp_path)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    # The worker logs its device once it has the job (the run is recorded by then), into
    # Hydra's job log rather than the terminal.
    printed = []
    reader = threading.Thread(target=lambda: printed.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120

    def device_logged() -> bool:
        return any("OpenCL device" in log.read_text(errors="replace")
                   for log in tmp_path.glob("outputs/*/*/app.log"))

    while not device_logged() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    workers = _children(process.pid)
    if len(workers) != 1:
        process.kill()
        pytest.fail(f"no worker process: {process.communicate()[1][-3000:]}")
    (worker,) = workers
    time.sleep(2)  # the compile, then the checked launch that spins
    sent = time.monotonic()
    process.send_signal(signum)
    err = process.stderr.read()
    process.wait(timeout=30)
    took = time.monotonic() - sent
    reader.join(timeout=5)
    out = "".join(printed)
    assert process.returncode == code, err[-3000:]
    assert took < 2.0, f"{took:.2f} s"
    assert not Path(f"/proc/{worker}").exists() or \
        Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert [line for line in err.splitlines() if ERROR in line] == [
        f"{ERROR} interrupted by {signal.Signals(signum).name}"
        + (" (Ctrl-C)" if signum == signal.SIGINT else "")]
    assert "Traceback" not in out + err
    assert _only_run(tmp_path).info.status == "KILLED"


def test_a_sanitizer_for_the_other_backend_is_refused_in_one_line(tmp_path):
    done = gemmlab(tmp_path, "kernel=matmul_1", "check.sanitizer=memcheck", *_store(tmp_path))
    one_error_line(done, "check.sanitizer=memcheck", "backend=cuda", "check.sanitizer=oclgrind")


def _oclgrind_installed() -> bool:
    import pyopencl as cl

    return any("oclgrind" in p.name.lower() for p in cl.get_platforms())


@pytest.mark.skipif(not _oclgrind_installed(), reason="needs pip install 'pyopencl[oclgrind]'")
def test_oclgrind_names_the_line_that_writes_past_the_end(tmp_path):
    done = gemmlab(tmp_path, "kernel=oob_1", "check.sanitizer=oclgrind", *USER_FOLDERS,
                   *_store(tmp_path))
    line = one_error_line(done, "oclgrind found errors in oob_1", "Invalid write",
                          "of oob_1.cl")
    source = (BROKEN / "opencl" / "oob_1.cl").read_text().splitlines()
    number = int(line.split("at line ")[1].split(",")[0])
    assert "C[M * N + col]" in source[number - 1]
    run = _only_run(tmp_path)
    assert run.info.status == "FAILED"
    assert run.data.tags["check.sanitizer"] == "oclgrind"


@pytest.mark.skipif(not _oclgrind_installed(), reason="needs pip install 'pyopencl[oclgrind]'")
def test_a_clean_kernel_under_oclgrind_is_verified_and_not_timed(tmp_path):
    done = gemmlab(tmp_path, "kernel=matmul_3", "check.sanitizer=oclgrind", *_store(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "oclgrind: no errors" in done.stdout
    run = _only_run(tmp_path)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["check/passed"] == 1.0
    assert "perf/gflops" not in run.data.metrics


@pytest.mark.skipif(not _oclgrind_installed(), reason="needs pip install 'pyopencl[oclgrind]'")
def test_a_kernel_under_a_tool_ends_at_the_tools_own_limit_and_says_so(tmp_path):
    """Issue 38: under a tool the kernel's stages have check.sanitizer_timeout_s, not
    timing.timeout_s (1 s here, which stops nothing). At its limit the line names the tool and
    the key, and the worker is killed at once: a run that asked it to exit would wait 30 s for
    the simulated kernel first (the run's own duration excludes the command's start-up)."""
    done = gemmlab(tmp_path, "kernel=hang_1", "check.sanitizer=oclgrind", "timing.timeout_s=1",
                   "check.sanitizer_timeout_s=3", *USER_FOLDERS, *_store(tmp_path))
    one_error_line(done, "hang_1 under oclgrind did not finish within 3 s at 16x16x16: the tool "
                         "slows a kernel by orders of magnitude",
                   "try a smaller size or raise check.sanitizer_timeout_s")
    run = _only_run(tmp_path)
    assert run.data.tags["gemmlab.status"] == "timeout"
    assert (run.info.end_time - run.info.start_time) / 1000 < 20


@pytest.mark.skipif(not _oclgrind_installed(), reason="needs pip install 'pyopencl[oclgrind]'")
def test_timing_timeout_does_not_bound_a_kernel_under_a_tool(tmp_path):
    """The simulated checked launch takes far longer than 1 ms, and under a tool that is fine:
    timing.timeout_s bounds the timed runs a tool never makes."""
    done = gemmlab(tmp_path, "kernel=matmul_3", "check.sanitizer=oclgrind",
                   "timing.timeout_s=0.001", *_store(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "oclgrind: no errors" in done.stdout


# On an NVIDIA GPU (marked `gpu`, skipped without one): a real device fault, and the tools.
from conftest import requires_cuda_gpu  # noqa: E402

CUDA = ["backend=cuda", "timing.repeats=3", "timing.warmup=1", *USER_FOLDERS]


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_device_fault_is_one_line_and_the_next_job_runs(tmp_path):
    done = gemmlab(tmp_path, "kernel=fault_1", "size=1000", *CUDA, *_store(tmp_path),
                   quick=False)
    one_error_line(done, "fault_1 made an illegal memory access at 1000x1000x1000; run again "
                         "with check.sanitizer=memcheck to find the line")
    assert "moduleUnload" not in done.stderr
    done = gemmlab(tmp_path, "kernel=fault_1,matmul_1", "size=1000", *CUDA, *_store(tmp_path),
                   quick=False, prefix=("-m", "runner", "-m"))
    assert done.returncode == 1, done.stderr[-3000:]  # the sweep closed, with a failed job
    assert "Traceback" not in done.stdout + done.stderr
    jobs = {r.data.params["kernel.name"]: r for r in runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
            if "kernel.name" in r.data.params}
    assert jobs["fault_1"].info.status == "FAILED"
    assert jobs["matmul_1"].info.status == "FINISHED"


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_write_past_the_end_is_caught_on_the_gpu_by_guards_and_by_memcheck(tmp_path):
    done = gemmlab(tmp_path, "kernel=oob_1", "size=1000", *CUDA, *_store(tmp_path), quick=False)
    one_error_line(done, "oob_1 wrote 1000 floats past the end of C", "first at element 1000000")
    done = gemmlab(tmp_path, "kernel=oob_1", "size=100", "check.sanitizer=memcheck", *CUDA,
                   *_store(tmp_path), quick=False)
    one_error_line(done, "memcheck found errors in oob_1", "Invalid __global__ write")


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_clean_step_under_memcheck_is_verified(tmp_path):
    done = gemmlab(tmp_path, "kernel=matmul_9", "m=70", "n=67", "k=50",
                   "check.sanitizer=memcheck", *CUDA, *_store(tmp_path), quick=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "memcheck: no errors" in done.stdout


@pytest.mark.gpu
@requires_cuda_gpu
def test_a_hung_gpu_kernel_ends_at_its_limit(tmp_path):
    done = gemmlab(tmp_path, "kernel=hang_1", "size=256", "timing.timeout_s=3", *CUDA,
                   *_store(tmp_path), quick=False)
    one_error_line(done, "hang_1 did not finish within 3 s at 256x256x256")
    assert _only_run(tmp_path).data.tags["gemmlab.status"] == "timeout"
