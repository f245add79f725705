"""gemmlab's runner: one Hydra-composed, verified, event-timed kernel run, logged to MLflow."""

import os
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("gemmlab")
except PackageNotFoundError:  # a checkout on PYTHONPATH that was never installed
    _pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    _found = re.search(r'^version = "([^"]+)"', _pyproject.read_text(), re.M) \
        if _pyproject.is_file() else None
    __version__ = _found.group(1) if _found else "unknown"

# NVIDIA's driver caches compiled kernels (on disk and for the process) and prints no ptxas report
# on a cache hit, so registers and spills would go missing from every build of a kernel but the
# first. The driver reads this once, when it initialises, so it is set as early as possible.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

# For the same reason (the OpenCL loader reads its vendors once), Intel's pip-installed CPU
# runtime is registered here, before anything can ask pyopencl for platforms.
from runner.backends.cpu_runtimes import register_pip_cpu_runtimes  # noqa: E402

register_pip_cpu_runtimes()
