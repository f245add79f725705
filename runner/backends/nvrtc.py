"""Compile CUDA C++ to a cubin through NVRTC, with ptxas' `-v` report.

Works without a GPU (CuPy's low-level NVRTC binding plus the NVRTC wheel), so sources are
compiled and their registers and spills checked on any machine.
"""

import functools
from dataclasses import dataclass
from typing import Mapping, Optional

from runner.backends.build_log import first_error
from runner.errors import BuildError


@dataclass(frozen=True)
class NvrtcOutput:
    cubin: bytes
    log: str
    options: list[str]
    ptx: str = ""  # the PTX NVRTC made on the way (runner.inspect writes it out)


def compile_cuda(source: str, source_name: str, defines: Mapping[str, int],
                 compute_capability: int, max_registers: Optional[int] = None) -> NvrtcOutput:
    """NVRTC's output for this source and these options, compiled once per process.

    NVRTC 13 has been seen to return an empty log when the same program is compiled again in
    one process (a sweep), which would lose the ptxas report; the first output is kept instead.
    """
    return _compile_once(source, source_name, tuple(defines.items()), int(compute_capability),
                         None if max_registers is None else int(max_registers))


@functools.lru_cache(maxsize=128)
def _compile_once(source: str, source_name: str, defines: tuple, compute_capability: int,
                  max_registers: Optional[int]) -> NvrtcOutput:
    from cupy_backends.cuda.libs import nvrtc

    options = [f"-D{name}={int(value)}" for name, value in defines]
    # From Hopper on, the architecture-specific target (sm_90a): the same code for what sm_90
    # has, plus the instructions only that architecture has (wgmma, matmul_12). A cubin runs on
    # the compute capability it was built for either way.
    suffix = "a" if compute_capability >= 90 else ""
    options += [f"-arch=sm_{int(compute_capability)}{suffix}", "-std=c++17",
                "--ptxas-options=-v",
                "-lineinfo"]
    if max_registers is not None:
        options.append(f"--maxrregcount={int(max_registers)}")
    program = nvrtc.createProgram(source, source_name, [], [])
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(program)
            first = first_error(log, source_name)
            raise BuildError(f"NVRTC compile of {source_name} failed: {first}",
                             f"options: {' '.join(options)}\n\n{log}") from None
        log = nvrtc.getProgramLog(program)
        # NVRTC's getCUBIN has been seen to drop the final byte; an extra NUL is harmless to
        # the ELF loader and to cuobjdump, a missing one is not.
        cubin = nvrtc.getCUBIN(program) + b"\0"
        ptx = nvrtc.getPTX(program)
        ptx = (ptx.decode(errors="replace") if isinstance(ptx, bytes) else ptx).rstrip("\0")
    finally:
        nvrtc.destroyProgram(program)
    return NvrtcOutput(cubin, log, options, ptx)
