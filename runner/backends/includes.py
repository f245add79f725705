"""What a kernel source may #include: files beside it in its kernel folder; (CUDA) the CUDA
headers NVRTC can compile, and host headers, which NVRTC stands in for.

A kernel brought from elsewhere often keeps helpers in a header next to it (`#include
"tiles.cuh"`): each backend gets the source's folder as an include path (OpenCL `-I<folder>`,
NVRTC `-I<folder>`).

Host headers (`<cstdio>`, `<cassert>`, `<cublas_v2.h>`, `<cuda_runtime.h>`): nvcc compiles a
`.cu` file's device code beside its host code and ignores what device code does not use; NVRTC
compiles device code only and has no host headers. So a system host header that NVRTC cannot
find is given to it as a stand-in (`stand_ins`, through NVRTC's in-memory headers): empty, or
with what device code may take from it (`int32_t`, `FLT_MAX`, `INT_MAX`, `M_PI`); `assert` and
`printf` are NVRTC's own device functions, and `uint`, `ushort`, `ulong` are defined for every
CUDA source as glibc's <sys/types.h> defines them for nvcc (`PRELUDE`). Headers of no system
(the CUDA samples' `helper_cuda.h`, OpenMP, MPI) are refused in one line, as is every host
header in an OpenCL source.

Defines that win over a header's own: a header beside the source that `#define`s, without an
`#ifndef`, a macro the run passes as `-D` with another value (a tutorial's settings.h with
`#define KERNEL 8` against the YAML's `KERNEL: 7`) would silently override the run's value.
`yielding_headers` gives the compiler a copy of such a header with those lines left out (their
line numbers kept), so the YAML's value wins, and says so in the compile log.
"""

import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional

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


# Host headers of no system, or of another one: NVRTC gets no stand-in for them.
_NOT_STOOD_IN = re.compile(r"^(helper_\w+|omp|mpi|windows)\.h$")

# `uint`, `ushort`, `ulong`: glibc's <sys/types.h> typedefs, which every .cu file compiled by
# nvcc on Linux has (cuda_runtime.h includes <stdlib.h>); pre-included in every NVRTC compile.
PRELUDE_NAME = "gemmlab_nvcc_host_types.h"
PRELUDE = """// gemmlab: what nvcc's host headers give every .cu file on Linux (glibc <sys/types.h>)
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned long ulong;
"""

_INT_TYPES = """typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef long intmax_t;
typedef unsigned long uintmax_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define UINT8_MAX 255
#define INT16_MIN (-32767-1)
#define INT16_MAX 32767
#define UINT16_MAX 65535
#define INT32_MIN (-2147483647-1)
#define INT32_MAX 2147483647
#define UINT32_MAX 4294967295U
#define INT64_MIN (-9223372036854775807L-1)
#define INT64_MAX 9223372036854775807L
#define UINT64_MAX 18446744073709551615UL
"""
_STD_INT_TYPES = ("namespace std { using ::int8_t; using ::int16_t; using ::int32_t; "
                  "using ::int64_t; using ::uint8_t; using ::uint16_t; using ::uint32_t; "
                  "using ::uint64_t; using ::intptr_t; using ::uintptr_t; using ::intmax_t; "
                  "using ::uintmax_t; }\n")
_FLOAT_LIMITS = """#define FLT_MAX 3.40282346638528859811704183484516925e+38F
#define FLT_MIN 1.17549435082228750796873653722224568e-38F
#define FLT_EPSILON 1.19209289550781250000000000000000000e-7F
#define FLT_MANT_DIG 24
#define FLT_DIG 6
#define DBL_MAX 1.79769313486231570814527423731704357e+308
#define DBL_MIN 2.22507385850720138309023271733240406e-308
#define DBL_EPSILON 2.22044604925031308084726333618164062e-16
#define DBL_MANT_DIG 53
#define DBL_DIG 15
"""
_INT_LIMITS = """#define CHAR_BIT 8
#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#define SHRT_MIN (-32768)
#define SHRT_MAX 32767
#define USHRT_MAX 65535
#define INT_MIN (-2147483647-1)
#define INT_MAX 2147483647
#define UINT_MAX 4294967295U
#define LONG_MIN (-9223372036854775807L-1)
#define LONG_MAX 9223372036854775807L
#define ULONG_MAX 18446744073709551615UL
#define LLONG_MIN (-9223372036854775807LL-1)
#define LLONG_MAX 9223372036854775807LL
#define ULLONG_MAX 18446744073709551615ULL
"""
_MATH = """#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#define INFINITY __int_as_float(0x7f800000)
#define HUGE_VALF __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
"""
# What a stand-in holds besides its comment: what device code may take from the host header.
_STAND_IN_TEXT = {
    "stdint.h": _INT_TYPES, "inttypes.h": _INT_TYPES,
    "cstdint": _INT_TYPES + _STD_INT_TYPES, "cinttypes": _INT_TYPES + _STD_INT_TYPES,
    "float.h": _FLOAT_LIMITS, "cfloat": _FLOAT_LIMITS,
    "limits.h": _INT_LIMITS, "climits": _INT_LIMITS,
    "math.h": _MATH, "cmath": _MATH,
}
_NOTES = {
    "assert.h": "assert is NVRTC's device assert", "cassert": "assert is NVRTC's device assert",
    "stdio.h": "printf is NVRTC's device printf", "cstdio": "printf is NVRTC's device printf",
}
# Headers a stand-in may be given for, besides is_host_header's: the C and C++ library headers
# device code also includes, and the CUDA runtime's own (NVRTC declares what device code uses).
_STAND_IN_ALSO = {"stdint.h", "inttypes.h", "cstdint", "cinttypes", "float.h", "cfloat",
                  "limits.h", "climits", "stddef.h", "cstddef", "type_traits", "limits",
                  "cuda_runtime.h", "device_launch_parameters.h"}


def may_stand_in(name: str) -> bool:
    """Whether NVRTC may be given a stand-in for this header when it cannot find it."""
    return ((is_host_header(name) or name in _STAND_IN_ALSO or name.startswith("sys/"))
            and not _NOT_STOOD_IN.match(Path(name).name))


def stand_in_text(name: str) -> str:
    """The stand-in NVRTC gets for a host header it does not have."""
    held = _STAND_IN_TEXT.get(name, "")
    notes = [_NOTES[name]] if name in _NOTES else []
    notes += ["below, what device code may take from it"] if held else []
    return (f"// gemmlab: a stand-in for the host header <{name}>, which NVRTC does not have "
            f"(it compiles device code only): nothing of the host's is declared here"
            + "".join(f"; {note}" for note in notes) + "\n" + held)


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
    line: `<file>:<line>: cannot include <name>: ...` (a BuildError); on CUDA only those NVRTC
    gets no stand-in for (may_stand_in)."""
    texts = [(source_name, source)]
    if folder is not None:
        texts += [(path.name, path.read_text(errors="replace"))
                  for path in local_includes(source, folder)]
    for name, text in texts:
        for match in _INCLUDE.finditer(text):
            header = match.group(2).strip()
            if backend == "cuda" and may_stand_in(header):
                continue  # NVRTC gets a stand-in where it cannot find it (nvrtc.py)
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


def _included_texts(source: str, folder: Optional[Path]) -> list[str]:
    return [source] + ([path.read_text(errors="replace")
                        for path in local_includes(source, folder)] if folder else [])


def host_includes(source: str, folder: Optional[Path]) -> list[str]:
    """The headers the source (or a file beside it that it includes) includes that are not
    beside it and that NVRTC may be given a stand-in for, in the order first included."""
    found: list[str] = []
    for text in _included_texts(source, folder):
        for match in _INCLUDE.finditer(text):
            header = match.group(2).strip()
            beside = folder is not None and (folder / header).is_file()
            if may_stand_in(header) and not beside and header not in found:
                found.append(header)
    return found


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]*(.*)$")
_IF = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_NOT_DEFINED = re.compile(r"^\s*!\s*defined\s*\(?\s*([A-Za-z_]\w*)\s*\)?\s*$")


def _overriding_defines(text: str, defines: Mapping[str, int]) -> list[tuple[int, int, str, str]]:
    """The `#define NAME value` lines of a header that would override the run's `-DNAME=<other
    value>`: (first line, last line, NAME, value), lines counted from 1; a define inside
    `#ifndef NAME` (or `#if !defined(NAME)`) gives way to the run's value itself."""
    lines = text.split("\n")
    found, guards = [], []  # guards: the macro each open conditional is `#ifndef` of, or None
    index = 0
    while index < len(lines):
        first = index
        logical = lines[index]
        while logical.endswith("\\") and index + 1 < len(lines):
            index += 1
            logical = logical[:-1] + " " + lines[index]
        directive = _IF.match(logical)
        if directive:
            kind, rest = directive.group(1), directive.group(2).split("//")[0].strip()
            if kind == "ifndef":
                guards.append(rest.split()[0] if rest else None)
            elif kind == "if":
                negated = _NOT_DEFINED.match(rest)
                guards.append(negated.group(1) if negated else None)
            elif kind == "ifdef":
                guards.append(None)
            elif kind in ("elif", "else") and guards:
                guards[-1] = None
            elif kind == "endif" and guards:
                guards.pop()
        else:
            define = _DEFINE.match(logical)
            if define and define.group(1) in defines and define.group(1) not in guards:
                name = define.group(1)
                value = re.sub(r"/\*.*?\*/|//.*$", "", define.group(2)).strip()
                if value != str(int(defines[name])):
                    found.append((first + 1, index + 1, name, value))
        index += 1
    return found


def yielding_headers(source: str, folder: Optional[Path], defines: Mapping[str, int]
                     ) -> tuple[dict[str, str], list[str]]:
    """The files beside the source that it includes, as the compiler gets them when one of
    them `#define`s a macro the run passes as `-D` with another value and no `#ifndef`:
    {path relative to the folder: text with those lines left out (blank, so every other line
    keeps its number)} for every such file and the files beside them, and one note a line that
    was left out (`settings.h:2: #define KERNEL 8 left out: the run's -DKERNEL=7 wins`).
    ({}, []) when no header overrides the run's defines."""
    if folder is None or not defines:
        return {}, []
    texts, notes = {}, []
    for path in local_includes(source, folder):
        text = path.read_text(errors="replace")
        relative = str(path.relative_to(folder.resolve()))
        clashes = _overriding_defines(text, defines)
        if clashes:
            lines = text.split("\n")
            for first, last, name, value in clashes:
                for number in range(first, last + 1):
                    lines[number - 1] = ""
                notes.append(f"{relative}:{first}: #define {name} {value} left out: the run's "
                             f"-D{name}={int(defines[name])} wins")
            text = "\n".join(lines)
        texts[relative] = text
    return (texts, notes) if notes else ({}, [])


def has_system_include(source: str, folder: Optional[Path]) -> bool:
    """Whether the source (or a file beside it that it includes) has an `#include <...>`."""
    return any(match.group(1) == "<" for text in _included_texts(source, folder)
               for match in _INCLUDE.finditer(text))


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


_STOOD_IN = re.compile(r"^gemmlab: stood in for the host headers (.+?) \(", re.M)
_GAVE_WAY = re.compile(r"^gemmlab: (\S+:\d+: #define \w+ .*? left out: the run's -D\w+=-?\d+ wins)$",
                       re.M)


def compile_notes(log: str) -> dict[str, list[str]]:
    """What gemmlab did to a compile, from its log's `gemmlab:` lines (for a tag or a report):
    `stood_in`, the host headers NVRTC got stand-ins for (`cassert`, ...); `gave_way`, the
    header lines left out for the run's defines (`settings.h:8: #define KERNEL 8 left out:
    the run's -DKERNEL=7 wins`)."""
    found = _STOOD_IN.search(log or "")
    stood_in = [name.strip().strip("<>") for name in found.group(1).split(",")] if found else []
    return {"stood_in": stood_in, "gave_way": _GAVE_WAY.findall(log or "")}
