"""The environment the drivers read once, when they initialise, set just before they can.

NVIDIA's driver caches compiled kernels (on disk and for the process) and prints no ptxas report
on a cache hit, so registers and spills would go missing from every build of a kernel but the
first: CUDA_CACHE_DISABLE=1 (unless the user set it). NVRTC from CUDA 12.9 on keeps its outputs
in the same cache (~/.nv/ComputeCache, measured with CUDA 13.0: a hit returned an empty log, and
the runs recorded no spills), so every NVRTC compile sets it first (`disable_compute_cache`);
gemmlab's own compile cache keeps NVRTC's log with each output instead.

The OpenCL ICD loader reads its vendors once, at the first clGetPlatformIDs: Intel's
pip-installed CPU runtime is registered before (runner/backends/cpu_runtimes.py).

`prepare()` runs where a backend's driver library is imported (the top of opencl.py, before
`import pyopencl`; cuda.py, before any CuPy call) and in tests that import pyopencl themselves;
never on `import runner`, which must leave the environment and /tmp alone.
"""

import os

_prepared = False


def prepare() -> None:
    """Set the drivers' environment once per process (later calls do nothing)."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    disable_compute_cache()
    from runner.backends.cpu_runtimes import register_pip_cpu_runtimes

    register_pip_cpu_runtimes()


def disable_compute_cache() -> None:
    """CUDA_CACHE_DISABLE=1 unless the user set it: before the driver initialises, and before
    NVRTC first compiles (a compile-pool process imports no backend)."""
    os.environ.setdefault("CUDA_CACHE_DISABLE", "1")
