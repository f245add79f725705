"""Compile CUDA C++ to a cubin through NVRTC, with ptxas' `-v` report.

Works without a GPU (CuPy's low-level NVRTC binding plus the NVRTC wheel), so sources are
compiled and their registers and spills checked on any machine.
"""

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from runner.backends.build_log import first_error
from runner.backends.includes import (
    check_includes,
    cuda_toolkit_include_dirs,
    has_system_include,
    include_options,
    local_includes,
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
                 name_expressions: Sequence[str] = ()) -> NvrtcOutput:
    """NVRTC's output for this source and these options, compiled once per process.

    NVRTC 13 has been seen to return an empty log when the same program is compiled again in
    one process (a sweep), which would lose the ptxas report; the first output is kept instead.
    `include_dirs`: the source's folder first (the files beside it that it includes); the CUDA
    toolkit's headers are added when it includes a `<...>` header. A host header is refused
    before NVRTC runs (runner/backends/includes.py). `name_expressions`: the entries, any C++
    name of a __global__ function (namespaced, a template instantiation), resolved by NVRTC to
    their names in the cubin (`lowered`), so a mangled name is never written by hand.
    """
    folder = Path(include_dirs[0]) if include_dirs else None
    check_includes(source, source_name, folder, "cuda")
    dirs = [str(d) for d in include_dirs]
    if has_system_include(source, folder):
        dirs += [d for d in cuda_toolkit_include_dirs() if d not in dirs]
    # The files it includes, by content: an edited header is another program.
    headers = tuple((str(path), path.read_bytes()) for path in local_includes(source, folder)) \
        if folder is not None else ()
    return _compile_once(source, source_name, tuple(defines.items()), int(compute_capability),
                         None if max_registers is None else int(max_registers), tuple(dirs),
                         headers, tuple(dict.fromkeys(name_expressions)))


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
def _compile_once(source: str, source_name: str, defines: tuple, compute_capability: int,
                  max_registers: Optional[int], include_dirs: tuple = (),
                  headers: tuple = (), name_expressions: tuple = ()) -> NvrtcOutput:
    from cupy_backends.cuda.libs import nvrtc

    options = [f"-D{name}={int(value)}" for name, value in defines]
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
    program = nvrtc.createProgram(source, source_name, [], [])
    try:
        for expression in name_expressions:
            nvrtc.addNameExpression(program, expression)
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(program)
            raise BuildError(f"NVRTC compile of {source_name} failed: "
                             f"{_first_error(log, source_name)}",
                             f"options: {' '.join(options)}\n"
                             f"entries: {', '.join(name_expressions)}\n\n{log}") from None
        log = nvrtc.getProgramLog(program)
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
