"""Where the configs and kernel sources live: the one place that knows.

Two layouts hold them:
- an installed wheel carries `conf/` and `kernels/` inside the package (`runner/conf`,
  `runner/kernels`, mapped there by pyproject's package-dir);
- a checkout (an editable install, or the tree on PYTHONPATH) keeps them at its top level,
  beside `runner/`.

A user's own kernels are found before the packaged ones: the folders of the config key
`kernel_dirs`, then those of GEMMLAB_KERNEL_PATH, each holding `opencl/` and `cuda/`. A user's
own configs come in through Hydra's search path (`hydra.searchpath=[file:///path/to/conf]`).
"""

import os
import re
from importlib.resources import files
from pathlib import Path
from typing import Iterable, Optional

from runner.errors import Refused, RunError

KERNEL_PATH_VARIABLE = "GEMMLAB_KERNEL_PATH"

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # runner/, above runner/config/


def checkout_root(package_dir: Path = PACKAGE_DIR) -> Optional[Path]:
    """The gemmlab checkout the package runs from, or None (an installed wheel).

    A checkout is the folder holding the package whose pyproject.toml names the project, so a
    wheel installed in a venv that sits inside some other repository is never taken for one.
    """
    pyproject = package_dir.parent / "pyproject.toml"
    if not pyproject.is_file():
        return None
    named = re.search(r'^name\s*=\s*"gemmlab"', pyproject.read_text(errors="replace"), re.M)
    return package_dir.parent if named else None


def _data_dir(name: str, marker: str) -> Path:
    # Hydra and the compilers read real files, so the packaged data must be on the file system
    # (a wheel installs unpacked; only a zipped package would fail here).
    packaged = files("runner") / name
    if isinstance(packaged, Path) and (packaged / marker).exists():
        return packaged
    root = checkout_root()
    if root is not None and (root / name / marker).exists():
        return root / name
    raise ImportError(f"gemmlab: no {name}/{marker} inside the installed package ({packaged}) "
                      f"nor in a checkout beside it ({PACKAGE_DIR.parent}); reinstall gemmlab "
                      "(pip install gemmlab-<version>.whl, or pip install -e . in a checkout)")


CONF_DIR = _data_dir("conf", "config.yaml")
KERNELS_DIR = _data_dir("kernels", "opencl")


def kernel_dirs(configured: Iterable[str] = ()) -> list[Path]:
    """Every folder searched for kernel sources, first match wins: the config key's folders,
    GEMMLAB_KERNEL_PATH's (os.pathsep-separated), then the packaged kernels."""
    from_environment = os.environ.get(KERNEL_PATH_VARIABLE, "").split(os.pathsep)
    user = [Path(entry).expanduser() for entry in [*configured, *from_environment] if entry]
    return [*user, KERNELS_DIR]


def check_source_name(file_name: str) -> None:
    """Refuse a kernel source name that is not a plain file name.

    The name comes from a config a user may have written: it picks a file inside the kernel
    folders and must not reach anything outside them."""
    if (not isinstance(file_name, str) or file_name in ("", ".", "..") or "/" in file_name
            or "\\" in file_name or "\0" in file_name or Path(file_name).name != file_name):
        raise Refused(f"kernel source name {file_name!r} must be a plain file name "
                      "(no folders, no '..'), found in kernel_dirs or the packaged kernels")


def source_file_name(kernel_cfg, backend: str) -> str:
    """The kernel's source file for `backend`; Refused when the step has none there."""
    file_name = kernel_cfg.sources.get(backend)
    if file_name is None:
        written = [name for name, value in kernel_cfg.sources.items() if value is not None]
        raise Refused(f"{kernel_cfg.name} has no {backend} source (it is written for "
                      f"backend={' or backend='.join(written)} only; see its YAML)")
    return file_name


def kernel_source_text(path: Path, include_first: Iterable[str] = ()) -> str:
    """The source as the compiler gets it: the headers of `include_first` (files beside it)
    included ahead of it, in that order, as a host program that joins a settings header and
    a kernel file into one program text does; the source's own lines keep their numbers."""
    text = path.read_text()
    first = list(include_first)
    for header in first:
        check_source_name(header)
        if not (path.parent / header).is_file():
            raise Refused(f"include_first: {header} is not beside {path.name} in {path.parent}")
    if not first:
        return text
    return "".join(f'#include "{header}"\n' for header in first) + "#line 1\n" + text


def kernel_source_path(backend: str, file_name: str, configured_dirs: Iterable[str] = ()) -> Path:
    """The source `file_name` of `backend` ("opencl" or "cuda") from the first folder of
    `kernel_dirs(configured_dirs)` that has it; a RunError naming every folder tried if none."""
    check_source_name(file_name)
    searched = kernel_dirs(configured_dirs)
    for folder in searched:
        candidate = folder / backend / file_name
        if candidate.is_file():
            return candidate
    raise RunError(f"kernel source {backend}/{file_name} is in none of: "
                   + ", ".join(str(folder) for folder in searched))
