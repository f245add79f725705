"""Compile CUDA C++ to a cubin through NVRTC, with ptxas' `-v` report.

Works without a GPU (CuPy's low-level NVRTC binding plus the NVRTC wheel), so sources are
compiled and their registers and spills checked on any machine.
"""

from dataclasses import dataclass
from typing import Mapping, Optional

from runner.errors import RunError


@dataclass(frozen=True)
class NvrtcOutput:
    cubin: bytes
    log: str
    options: list[str]


def compile_cuda(source: str, source_name: str, defines: Mapping[str, int],
                 compute_capability: int, max_registers: Optional[int] = None) -> NvrtcOutput:
    from cupy_backends.cuda.libs import nvrtc

    options = [f"-D{name}={int(value)}" for name, value in defines.items()]
    options += [f"-arch=sm_{int(compute_capability)}", "-std=c++17", "--ptxas-options=-v",
                "-lineinfo"]
    if max_registers is not None:
        options.append(f"--maxrregcount={int(max_registers)}")
    program = nvrtc.createProgram(source, source_name, [], [])
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            log = nvrtc.getProgramLog(program)
            first = next((line for line in log.splitlines() if "error" in line.lower()),
                         log.strip().splitlines()[0] if log.strip() else "no log")
            raise RunError(f"NVRTC compile of {source_name} failed: {first.strip()}") from None
        log = nvrtc.getProgramLog(program)
        # NVRTC's getCUBIN has been seen to drop the final byte; an extra NUL is harmless to
        # the ELF loader and to cuobjdump, a missing one is not.
        cubin = nvrtc.getCUBIN(program) + b"\0"
    finally:
        nvrtc.destroyProgram(program)
    return NvrtcOutput(cubin, log, options)
