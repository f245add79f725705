"""CPU OpenCL drivers installed from pip, registered before pyopencl looks for platforms.

PoCL from pip (`pyopencl[pocl]`) is built on LLVM 14, which does not know CPUs newer than it
(AMD Zen 5, family 1Ah, among them): LLVM then names the CPU "generic" and every build fails with
"unknown target CPU 'generic'". Intel's CPU runtime (`intel-opencl-rt` on PyPI) compiles for any
x86-64 CPU, AMD's included, but its wheel ships an ICD file naming a path that does not exist, so
the ICD loader never finds it. This module writes a vendors folder that names the installed
library and keeps every driver the loader would have found anyway (OCL_ICD_VENDORS, else
/etc/OpenCL/vendors); pyopencl's own loader also reads its bundled PoCL and Oclgrind ICDs.
"""

import hashlib
import os
import tempfile
from importlib.metadata import PackageNotFoundError, files
from pathlib import Path
from typing import Optional

SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")


def intel_cpu_library() -> Optional[Path]:
    """libintelocl.so of an installed `intel-opencl-rt`, or None."""
    try:
        installed = files("intel-opencl-rt") or []
    except PackageNotFoundError:
        return None
    for entry in installed:
        if entry.name == "libintelocl.so":
            path = Path(entry.locate()).resolve()
            if path.is_file():
                return path
    return None


def _existing_icds() -> list[Path]:
    configured = os.environ.get("OCL_ICD_VENDORS")
    where = Path(configured) if configured else SYSTEM_VENDORS
    if where.is_file():
        return [where]
    return sorted(where.glob("*.icd")) if where.is_dir() else []


def register_pip_cpu_runtimes() -> Optional[Path]:
    """Point OCL_ICD_VENDORS at a folder that includes the pip-installed Intel CPU runtime.

    Returns the folder, or None when there is nothing to register. Must run before the first
    clGetPlatformIDs of the process (the loader reads the variable once).
    """
    library = intel_cpu_library()
    if library is None:
        return None
    icds = {icd.name: icd.read_text() for icd in _existing_icds()}
    if any(str(library) in text for text in icds.values()):
        return None  # already registered (a parent process did it)
    icds["gemmlab-intel-cpu.icd"] = f"{library}\n"
    # One folder per set of drivers: concurrent processes write the same files with the same text.
    digest = hashlib.sha256(repr(sorted(icds.items())).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"gemmlab-ocl-vendors-{os.getuid()}" / digest
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in icds.items():
        target = folder / name
        if not target.is_file() or target.read_text() != text:
            temporary = folder / f".{name}.{os.getpid()}"
            temporary.write_text(text)
            temporary.replace(target)
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return folder
