"""One GPU per parallel job: `hydra/launcher=gpus gpus=N` runs N jobs at once, each on its own GPU.

A job claims a GPU by holding a lock file for as long as it runs, starting from its job number
(job k prefers GPU k mod N) and moving on to the next free one, so two jobs never share a GPU
even when one finishes early and the launcher hands its worker the next job. The claimed index
becomes the CUDA device id (`backend=cuda`) or the OpenCL device index within the chosen
platform (`backend=opencl backend.platform=NVIDIA`), and the run records it as `device.index`.
"""

import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from filelock import FileLock, Timeout

from runner.errors import RunError

WAIT_S = 24 * 3600  # a job waits for a GPU as long as the one before it runs


def gpus_here(backend) -> tuple[int, str]:
    """How many GPUs a pool's jobs can claim with `backend` (its config), and who counted
    them: CUDA's devices, or the GPUs of the OpenCL platform(s) `backend.platform` selects
    (Oclgrind's simulated one left out)."""
    if backend.name == "cuda":
        from runner.backends.cuda import gpu_count  # CuPy only where a pool is asked for

        return gpu_count(), "CUDA"
    try:
        from runner.backends import opencl

        platforms = opencl.cl.get_platforms()
    except Exception:  # no OpenCL loader or platform: no GPU it can use
        return 0, "OpenCL"
    count = 0
    for index, platform in enumerate(platforms):
        if not opencl._matches(backend.get("platform"), index, platform.name) \
                or "oclgrind" in platform.name.lower():
            continue
        try:
            count += len(platform.get_devices(device_type=opencl.cl.device_type.GPU))
        except Exception:  # CL_DEVICE_NOT_FOUND: a platform without GPUs
            continue
    return count, "OpenCL"


def pool_refusal(count: int, backend) -> Optional[str]:
    """Why a pool of `count` GPUs cannot run here (one line), or None: checked before a sweep
    starts any job, so that no job waits for or runs on a GPU that is not there."""
    found, counter = gpus_here(backend)
    if found >= count:
        return None
    platform = backend.get("platform")
    where = f"{counter}" + (f" (backend.platform={platform})" if counter == "OpenCL" and platform
                            else "")
    advice = (f"set gpus={found} or fewer" if found else
              "without a GPU, leave out hydra/launcher=gpus and gpus= (jobs then run one at a "
              "time, or in parallel with hydra/launcher=joblib)")
    return (f"gpus={count} gives each of {count} parallel jobs a GPU of its own, but {where} "
            f"sees {found} GPU(s) here: {advice}")


def _lock_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"gemmlab-gpu-locks-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def claim_gpu(count: int, job_number: int, folder: Optional[Path] = None) -> Iterator[int]:
    """Hold one of `count` GPUs for the duration of the block; yields its index."""
    if count < 1:
        raise RunError(f"gpus={count}: the GPU pool needs at least one GPU")
    folder = folder or _lock_folder()
    locks = [FileLock(str(folder / f"gpu{index}.lock")) for index in range(count)]
    first = job_number % count
    order = [(first + step) % count for step in range(count)]
    deadline = time.monotonic() + WAIT_S
    while True:
        for index in order:
            try:
                locks[index].acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield index
            finally:
                locks[index].release()
            return
        if time.monotonic() > deadline:
            raise RunError(f"no GPU of the pool of {count} came free in {WAIT_S} s")
        time.sleep(0.2)
