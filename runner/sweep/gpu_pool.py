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
