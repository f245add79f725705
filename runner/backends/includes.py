"""What a kernel source may #include: files beside it in its kernel folder, and (CUDA) the CUDA
headers NVRTC can compile; never a host header.

A kernel brought from elsewhere often keeps helpers in a header next to it (`#include
"tiles.cuh"`): each backend gets the source's folder as an include path (OpenCL `-I<folder>`,
NVRTC `-I<folder>`). A host header (`<cublas_v2.h>`, `<stdio.h>`, `<vector>`) is refused before
the compiler runs, in one line: device code cannot include it, and the runner does the host's
part itself (buffers, launches, checks).
"""

import os
import re
from pathlib import Path
from typing import Iterable, Optional

from runner.errors import BuildError

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)

# Headers only a host compiler can take: CUDA's host libraries and runtime API, the C and C++
# standard libraries' host parts, the CUDA samples' host helpers, OpenMP and MPI.
_HOST_LIBRARIES = re.compile(
    r"^(cublas\w*|cublasLt|cudnn\w*|cufft\w*|curand|cusparse\w*|cusolver\w*|cutensor\w*|nccl|"
    r"nvrtc|nvml|nvToolsExt\w*|cuda|cuda_runtime_api|cudaProfiler\w*|helper_\w+|omp|mpi)\.h$")
_HOST_STANDARD = {
    "assert.h", "ctype.h", "errno.h", "fenv.h", "locale.h", "math.h", "setjmp.h", "signal.h",
    "stdio.h", "stdlib.h", "string.h", "time.h", "unistd.h", "pthread.h", "malloc.h",
    "sys/time.h", "windows.h",
    "algorithm", "array", "atomic", "cassert", "chrono", "cmath", "cstdio", "cstdlib",
    "cstring", "ctime", "deque", "exception", "fstream", "functional", "iomanip", "ios",
    "iostream", "istream", "iterator", "list", "map", "memory", "mutex", "numeric", "ostream",
    "random", "set", "sstream", "stdexcept", "string", "thread", "tuple", "unordered_map",
    "unordered_set", "utility", "vector",
}


def is_host_header(name: str) -> bool:
    return name in _HOST_STANDARD or bool(_HOST_LIBRARIES.match(Path(name).name))


def _line_of(source: str, position: int) -> int:
    return source.count("\n", 0, position) + 1


def local_includes(source: str, folder: Path) -> list[Path]:
    """The files beside the source (in `folder`) that it includes, and those they include."""
    found: list[Path] = []
    pending = [source]
    while pending:
        text = pending.pop()
        for match in _INCLUDE.finditer(text):
            candidate = (folder / match.group(2)).resolve()
            inside = folder.resolve() in candidate.parents
            if inside and candidate.is_file() and candidate not in found:
                found.append(candidate)
                pending.append(candidate.read_text(errors="replace"))
    return found


def check_includes(source: str, source_name: str, folder: Optional[Path],
                   backend: str) -> None:
    """Refuse a host header in the source or in a file beside it that it includes, in one
    line: `<file>:<line>: cannot include <name>: ...` (a BuildError)."""
    texts = [(source_name, source)]
    if folder is not None:
        texts += [(path.name, path.read_text(errors="replace"))
                  for path in local_includes(source, folder)]
    for name, text in texts:
        for match in _INCLUDE.finditer(text):
            header = match.group(2).strip()
            if is_host_header(header) and not (
                    folder is not None and match.group(1) == '"' and (folder / header).is_file()):
                where = f"{name}:{_line_of(text, match.start())}"
                offered = ("files beside it and the CUDA headers NVRTC compiles (cuda_fp16.h, "
                           "mma.h, cuda_pipeline.h, ...)" if backend == "cuda"
                           else "files beside it")
                raise BuildError(
                    f"{where}: cannot include <{header}>: it is a host header, and device code "
                    f"cannot include it (the runner does the host's part: buffers, launches, "
                    f"checks); a kernel may include {offered}",
                    f"{where}: #include of the host header {header} refused before compiling\n")


def has_system_include(source: str, folder: Optional[Path]) -> bool:
    """Whether the source (or a file beside it that it includes) has an `#include <...>`."""
    texts = [source] + ([path.read_text(errors="replace")
                         for path in local_includes(source, folder)] if folder else [])
    return any(match.group(1) == "<" for text in texts for match in _INCLUDE.finditer(text))


def cuda_toolkit_include_dirs() -> list[str]:
    """Where NVRTC finds the CUDA headers (cuda_fp16.h, mma.h, ...): NVRTC itself ships none
    before CUDA 13, so the toolkit's include folder (CUDA_PATH, CUDA_HOME, /usr/local/cuda)
    and CuPy's copy of libcu++ (cuda/std/...), those that exist."""
    candidates: list[Path] = []
    for variable in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(variable):
            candidates.append(Path(os.environ[variable]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    candidates += sorted(Path("/usr/local").glob("cuda-*/include"), reverse=True)
    found = [str(path) for path in candidates if (path / "cuda_runtime.h").is_file()][:1]
    try:
        import cupy

        libcudacxx = Path(cupy.__file__).parent / "_core/include/cupy/_cccl/libcudacxx"
        if libcudacxx.is_dir():
            found.append(str(libcudacxx))
    except ImportError:
        pass
    return found


def include_options(folders: Iterable[str]) -> list[str]:
    return [f"-I{folder}" for folder in folders]
