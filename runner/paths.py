"""Where the configs and kernel sources live: beside the package, in the repository checkout.

The project is installed editable (`pip install -e .`), so the package directory sits in the
checkout and `python -m runner` finds `conf/` and `kernels/` from any working directory.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
KERNELS_DIR = REPO_ROOT / "kernels"

if not (CONF_DIR / "config.yaml").is_file():
    raise ImportError(
        f"gemmlab: no conf/config.yaml beside the runner package (looked in {CONF_DIR}); "
        "install the checkout in editable mode: pip install -e ."
    )


def kernel_source_path(backend: str, file_name: str) -> Path:
    return KERNELS_DIR / backend / file_name
