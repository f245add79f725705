"""Compile CUDA C++ to a cubin through NVRTC, with ptxas' `-v` report.

Works without a GPU (CuPy's low-level NVRTC binding plus the NVRTC wheel), so sources are
compiled and their registers and spills checked on any machine.
"""

import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from runner.backends.build_log import first_error
from runner.backends.includes import (
    PRELUDE,
    PRELUDE_NAME,
    check_includes,
    cuda_toolkit_include_dirs,
    has_system_include,
    host_includes,
    include_options,
    local_includes,
    stand_in_text,
    yielding_headers,
)
from runner.errors import BuildError


@dataclass(frozen=True)
class NvrtcOutput:
    cubin: bytes
    log: str
    options: list[str]
    ptx: str = ""  # the PTX NVRTC made on the way (runner.inspect writes it out)
    # Each name expression asked for (an entry as the YAML names it: `matmul_2`,
    # `ns::gemm`, `Sgemm<128, 8, true>`) -> its name in the cubin (NVRTC's lowered name).
    lowered: Mapping[str, str] = field(default_factory=dict)


def compile_cuda(source: str, source_name: str, defines: Mapping[str, int],
                 compute_capability: int, max_registers: Optional[int] = None,
                 include_dirs: Sequence[str] = (),
                 name_expressions: Sequence[str] = (),
                 while_held: Optional[Callable[[NvrtcOutput], None]] = None) -> NvrtcOutput:
    """NVRTC's output for this source and these options, compiled once per process.

    NVRTC 13 has been seen to return an empty log when the same program is compiled again in
    one process (a sweep), which would lose the ptxas report; the first output is kept instead.
    `include_dirs`: the source's folder first (the files beside it that it includes); the CUDA
    toolkit's headers are added when it includes a `<...>` header. A system host header NVRTC
    cannot find gets a stand-in, `uint`/`ushort`/`ulong` are pre-included, a header beside the
    source gives way to the run's defines, each said in the log's first lines; a header of no
    system is refused before NVRTC runs (runner/backends/includes.py). `name_expressions`: the entries, any C++
    name of a __global__ function (namespaced, a template instantiation), resolved by NVRTC to
    their names in the cubin (`lowered`), so a mangled name is never written by hand.
    `while_held`: called with the output while the program's compile lock is held, before a
    new output is written to the compile cache (the compile pool takes its SASS's lock there,
    so a job that finds the entry and inspects the program waits for that disassembly rather
    than making its own).
    """
    folder = Path(include_dirs[0]) if include_dirs else None
    check_includes(source, source_name, folder, "cuda")
    dirs = [str(d) for d in include_dirs]
    if has_system_include(source, folder):
        dirs += [d for d in cuda_toolkit_include_dirs() if d not in dirs]
    # The files it includes, by content: an edited header is another program.
    headers = tuple((str(path), path.read_bytes()) for path in local_includes(source, folder)) \
        if folder is not None else ()
    stand_ins = tuple(name for name in host_includes(source, folder)
                      if not _nvrtc_finds(name, tuple(dirs)))
    yielded, notes = yielding_headers(source, folder, defines)
    request = (source, source_name, tuple(defines.items()), int(compute_capability),
               None if max_registers is None else int(max_registers), tuple(dirs), headers,
               tuple(dict.fromkeys(name_expressions)), stand_ins, tuple(yielded.items()),
               tuple(notes))
    if while_held is None:
        return _compile_once(*request)
    path = _cache_path(request)
    if path is None:
        output = _compile_once(*request)
        while_held(output)
        return output
    with entry_lock(path):
        cached = _cache_read(path)
        output = cached if cached is not None else _nvrtc_compile(*request)
        while_held(output)  # first: a job that finds the entry then waits for what it holds
        if cached is None:
            _cache_write(path, output)
    return output


@contextlib.contextmanager
def _stack_limit_kept():
    """NVRTC raises the process's stack limit (RLIMIT_STACK) to unlimited while it compiles and
    leaves it so; every process started afterwards inherits it, and glibc then gives new threads
    2 MB stacks instead of the limit's 8 MB, which PoCL's compiler threads overflow (a CPU job
    started by a process that compiled CUDA died of SIGSEGV). The limit is put back after."""
    kept = resource.getrlimit(resource.RLIMIT_STACK)
    try:
        yield
    finally:
        if resource.getrlimit(resource.RLIMIT_STACK) != kept:
            resource.setrlimit(resource.RLIMIT_STACK, kept)


def _nvrtc():
    """CuPy's NVRTC binding, with NVRTC's own cache of outputs off first (from CUDA 12.9 on it
    shares the driver's, and a hit there has no ptxas report: driver_env)."""
    from runner.backends.driver_env import disable_compute_cache

    disable_compute_cache()
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


@functools.lru_cache(maxsize=256)
def _nvrtc_finds(header: str, include_dirs: tuple) -> bool:
    """Whether NVRTC compiles `#include <header>` alone with these include folders (its own
    headers, the toolkit's `cuda_runtime.h`): then it needs no stand-in."""
    nvrtc = _nvrtc()
    program = nvrtc.createProgram(f"#include <{header}>\n", "probe.cu", [PRELUDE.encode()],
                                  [PRELUDE_NAME.encode()])
    try:
        with _stack_limit_kept():
            nvrtc.compileProgram(program, ["-std=c++17", f"-include={PRELUDE_NAME}",
                                           *include_options(include_dirs)])
        return True
    except nvrtc.NVRTCError:
        return False
    finally:
        nvrtc.destroyProgram(program)


_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)", re.S)
_PARAM_TYPE = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)(\s+[\w$]+\[(\d*)\])?")
_PTX_KINDS = {"u32": "int", "s32": "int", "b32": "int", "f32": "float",
              "u64": "pointer", "s64": "pointer", "b64": "pointer"}  # 64-bit: a pointer


def ptx_signatures(ptx: str) -> dict[str, tuple[str, ...]]:
    """Each entry function's parameter kinds (base.CompiledProgram.signatures), from the PTX:
    32-bit ints, floats, 64-bit values (pointers), 128 bytes aligned to 64 (a CUtensorMap,
    "tensor_map"); anything else "other <PTX type>"."""
    found = {}
    for match in _ENTRY.finditer(ptx or ""):
        kinds = []
        for param in _PARAM_TYPE.finditer(match.group(2)):
            align, ptx_type, array, length = param.groups()
            if array and ptx_type == "b8" and align == "64" and length == "128":
                kinds.append("tensor_map")
                continue
            kinds.append(f"other .{ptx_type}[]" if array else
                         _PTX_KINDS.get(ptx_type, f"other .{ptx_type}"))
        found[match.group(1)] = tuple(kinds)
    return found


@functools.lru_cache(maxsize=128)
def _compile_once(*request) -> NvrtcOutput:
    """NVRTC's output for a request (`_nvrtc_compile`'s arguments), from the compile cache on
    disk where an earlier process (a sweep's compile pool, runner/sweep/precompile.py, or an
    earlier run) made it, else compiled now and kept there."""
    path = _cache_path(request)
    cached = _cache_read(path) if path is not None else None
    if cached is not None:
        return cached
    if path is None:
        return _nvrtc_compile(*request)
    with entry_lock(path):
        cached = _cache_read(path)  # made while another process held the lock
        if cached is not None:
            return cached
        output = _nvrtc_compile(*request)
        _cache_write(path, output)
    return output


# How long a process waits for another that is making the same cache entry (a sweep's compile
# pool, ahead of the job) before it makes the entry itself.
COMPILE_LOCK_WAIT_S = 120.0
_LOCK_POLL_S = 0.02


@contextlib.contextmanager
def entry_lock(path: Path):
    """Held while this process makes the compile cache's entry at `path` (a program, or its
    SASS: runner/inspect/program.py): a process that misses the entry while another makes it
    waits for that one instead of making it a second time (a job that starts while the pool is
    compiling its program). An advisory lock on a file beside the entry, which the system drops
    when its holder dies, and which two threads of one process wait for each other on too;
    where it cannot be taken (no fcntl, a folder that cannot be written) or after
    COMPILE_LOCK_WAIT_S, the process goes on without it."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(f"{path.stem}.lock"), "a")
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + COMPILE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(_LOCK_POLL_S)
            except OSError:  # a file system without locks
                break
        yield
    finally:
        handle.close()  # releases the lock, if held


CACHE_ENV = "GEMMLAB_COMPILE_CACHE"  # a folder, or 0 / off for none
_CACHE_FORMAT = 1


def cache_folder() -> Optional[Path]:
    """Where NVRTC's outputs are kept between processes: $GEMMLAB_COMPILE_CACHE, else
    $XDG_CACHE_HOME/gemmlab/nvrtc (~/.cache/gemmlab/nvrtc); None when it is set to 0 or off."""
    from runner.user_cache import cache_path

    return cache_path(CACHE_ENV, "nvrtc")


@functools.lru_cache(maxsize=1)
def _compiler_identity() -> str:
    """What an output depends on besides the request: NVRTC's version and gemmlab's own
    compile code (the options, the prelude, the stand-ins are written in these files)."""
    from runner.backends import includes

    nvrtc = _nvrtc()

    code = hashlib.sha256()
    for module_file in (__file__, includes.__file__):
        code.update(Path(module_file).read_bytes())
    return f"{_CACHE_FORMAT}:{nvrtc.getVersion()}:{code.hexdigest()}"


def _cache_path(request: tuple) -> Optional[Path]:
    folder = cache_folder()
    if folder is None:
        return None
    try:
        identity = _compiler_identity()
    except Exception:  # no NVRTC to ask: the compile itself says so
        return None
    digest = hashlib.sha256(repr((identity, request)).encode()).hexdigest()
    return folder / digest[:2] / f"{digest}.json"


def _cache_read(path: Path) -> Optional[NvrtcOutput]:
    try:
        data = json.loads(path.read_text())
        return NvrtcOutput(base64.b64decode(data["cubin"]), data["log"], list(data["options"]),
                           data["ptx"], dict(data["lowered"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not there, or not whole: compiled again


def cache_write(path: Path, data: dict) -> None:
    """A compile-cache entry, whole or not at all (a reader in another process meanwhile sees
    the old state); a cache that cannot be written is no error: the next process does the work
    again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(data))
        os.replace(partial, path)
    except OSError:
        pass


def _cache_write(path: Path, output: NvrtcOutput) -> None:
    cache_write(path, {"cubin": base64.b64encode(output.cubin).decode(), "log": output.log,
                       "options": list(output.options), "ptx": output.ptx,
                       "lowered": dict(output.lowered)})


def _nvrtc_compile(source: str, source_name: str, defines: tuple, compute_capability: int,
                   max_registers: Optional[int], include_dirs: tuple = (),
                   headers: tuple = (), name_expressions: tuple = (), stand_ins: tuple = (),
                   yielded: tuple = (), notes: tuple = ()) -> NvrtcOutput:
    nvrtc = _nvrtc()
    options = [f"-D{name}={int(value)}" for name, value in defines]
    options.append(f"-include={PRELUDE_NAME}")  # uint, ushort, ulong, as nvcc's host headers
    options += include_options(include_dirs)
    # From Hopper on, the architecture-specific target (sm_90a): the same code for what sm_90
    # has, plus the instructions only that architecture has (wgmma, matmul_12). A cubin runs on
    # the compute capability it was built for either way.
    suffix = "a" if compute_capability >= 90 else ""
    # -lineinfo, always (a sanitizer run included): compute-sanitizer's reports then name
    # "file.cu:line" for each access (runner/job/sanitizers.py); measured as a cost of the timed
    # kernel and ruled out (docs/ladders/sgemm.md).
    options += [f"-arch=sm_{int(compute_capability)}{suffix}", "-std=c++17",
                "--ptxas-options=-v",
                "-lineinfo"]
    if max_registers is not None:
        options.append(f"--maxrregcount={int(max_registers)}")
    # In memory, ahead of every include folder: the prelude, the stand-ins for host headers,
    # and the headers beside the source whose own defines gave way to the run's.
    memory = [(PRELUDE_NAME, PRELUDE)] + [(name, stand_in_text(name)) for name in stand_ins] \
        + list(yielded)
    said = list(notes)
    if stand_ins:
        said.insert(0, "stood in for the host headers "
                    + ", ".join(f"<{name}>" for name in stand_ins)
                    + " (NVRTC compiles device code only and has none of them; "
                      "runner/backends/includes.py says what each stand-in holds)")
    said = "".join(f"gemmlab: {line}\n" for line in said)
    program = nvrtc.createProgram(source, source_name, [text.encode() for _, text in memory],
                                  [name.encode() for name, _ in memory])
    try:
        for expression in name_expressions:
            nvrtc.addNameExpression(program, expression)
        try:
            with _stack_limit_kept():
                nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(program)
            reason = _host_use(log, source_name, stand_ins) or _first_error(log, source_name)
            raise BuildError(f"NVRTC compile of {source_name} failed: {reason}",
                             f"options: {' '.join(options)}\n"
                             f"entries: {', '.join(name_expressions)}\n{said}\n{log}") from None
        report = nvrtc.getProgramLog(program)
        if "ptxas" not in report:  # asked for with -v: an output NVRTC kept from before
            said += ("gemmlab: NVRTC printed no ptxas report (an output from its own cache, "
                     f"CUDA_CACHE_DISABLE={os.environ.get('CUDA_CACHE_DISABLE', '')!r}): this "
                     "build's spills and stack frame are not known\n")
        log = said + report
        lowered = {expression: nvrtc.getLoweredName(program, expression)
                   for expression in name_expressions}
        # NVRTC's getCUBIN has been seen to drop the final byte; an extra NUL is harmless to
        # the ELF loader and to cuobjdump, a missing one is not.
        cubin = nvrtc.getCUBIN(program) + b"\0"
        ptx = nvrtc.getPTX(program)
        ptx = (ptx.decode(errors="replace") if isinstance(ptx, bytes) else ptx).rstrip("\0")
    finally:
        nvrtc.destroyProgram(program)
    return NvrtcOutput(cubin, log, options, ptx, lowered)


_NAME_MAP_ERROR = re.compile(r"^__nv_name_map\(\d+\): error: (?P<msg>.+)$", re.M)
_NAME_EXPRESSION = re.compile(r"#pragma nv_mangled_name (?P<name>.+?)\s*$", re.M)


def _first_error(log: str, source_name: str) -> str:
    """The first error, where an entry that names no __global__ function says which entry (NVRTC
    reports it against its own `__nv_name_map`, not the source)."""
    source_errors = [line for line in log.splitlines() if not line.startswith("__nv_name_map")
                     and re.search(r"\(\d+\): (?:catastrophic )?error", line)]
    found = _NAME_MAP_ERROR.search(log)
    if found and not source_errors:
        named = _NAME_EXPRESSION.search(log)
        which = f" `{named['name']}`" if named else ""
        return (f"the entry{which} names no __global__ function of {source_name} that NVRTC "
                f"can instantiate: {found['msg'].strip()}")
    return first_error(log, source_name)


# What device code may name that only a host header declares: the header it comes from.
_HOST_NAMES = [
    (re.compile(r"^(cuda[A-Z]\w*|CUDA_\w+)$"), ("cuda_runtime.h", "cuda_runtime_api.h", "cuda.h")),
    (re.compile(r"^(cu[A-Z]\w*|CU_\w+|CUresult)$"), ("cuda.h",)),
    (re.compile(r"^(cublas\w*|CUBLAS_\w+)$"), ("cublas_v2.h", "cublas.h", "cublasLt.h")),
    (re.compile(r"^(f?printf|fopen|fclose|fflush|fputs|puts|s?n?printf|scanf|FILE|stderr|stdout|"
                r"fwrite|fread|perror)$"), ("cstdio", "stdio.h")),
    (re.compile(r"^(exit|abort|rand|srand|atoi|atof|atol|getenv|qsort|system|EXIT_\w+|"
                r"RAND_MAX|calloc|realloc)$"), ("cstdlib", "stdlib.h")),
    (re.compile(r"^(strlen|strcpy|strncpy|strcmp|strcat|strerror)$"), ("cstring", "string.h")),
]
_UNDEFINED = re.compile(r'^(?P<file>.+?)\((?P<line>\d+)\): error: (?:identifier "(?P<name>[\w]+)" '
                        r'is undefined|namespace "std" has no member "(?P<std>\w+)")', re.M)


def _host_use(log: str, source_name: str, stand_ins: tuple) -> str:
    """Where compilation failed because device code uses a host facility of a header that was
    stood in for: one line naming the place, the header and the identifier; else ""."""
    if not stand_ins:
        return ""
    found = _UNDEFINED.search(log)
    if found is None:
        return ""
    where = first_error(found.group(0), source_name).split(": error:")[0]
    if found["std"]:
        headers = [name for name in stand_ins if "." not in name]
        name = f"std::{found['std']}"
    else:
        name = found["name"]
        headers = next(([h for h in candidates if h in stand_ins]
                        for pattern, candidates in _HOST_NAMES if pattern.match(name)), [])
    if not headers:
        return ""
    shown = " or ".join(f"<{header}>" for header in headers)
    return (f"{where}: `{name}` is host code from {shown}, which NVRTC does not have (gemmlab "
            f"stood in for it with a header that declares nothing of the host's): NVRTC "
            f"compiles device code only, so host code (main, cudaMalloc, cuBLAS calls, "
            f"std:: algorithms) must stay out of the kernel's file; include a file that "
            f"holds only the kernels")
