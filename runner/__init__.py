"""gemmlab's runner: one Hydra-composed, verified, event-timed kernel run, logged to MLflow.

Importing the package sets no environment variable and writes no file: the drivers' environment
is prepared where a backend is imported (runner/backends/driver_env.py)."""

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
