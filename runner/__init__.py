"""gemmlab's runner: one Hydra-composed, verified, event-timed kernel run, logged to MLflow."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gemmlab")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"
