"""Read registers, spills, stack and shared memory from a ptxas `-v` report.

NVRTC (`--ptxas-options=-v`) and NVIDIA's OpenCL (`-cl-nv-verbose`) both print it; it is the
only place the register count of an OpenCL kernel can be had.
"""

import re

from runner.backends.base import KernelResources

_FUNCTION = re.compile(r"(?:Compiling entry function|Function properties for) '?(\w+)'?")
_USED = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(log: str) -> dict[str, KernelResources]:
    """Resources per entry function named in the report."""
    found: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        match = _FUNCTION.search(line)
        if match:
            current = found.setdefault(match.group(1), {})
            continue
        if current is None:
            continue
        if match := _FRAME.search(line):
            current["stack_bytes"] = int(match.group(1))
            current["spill_store_bytes"] = int(match.group(2))
            current["spill_load_bytes"] = int(match.group(3))
        if match := _USED.search(line):
            current["registers"] = int(match.group(1))
            smem = _SMEM.search(line)
            current["local_memory_bytes"] = int(smem.group(1)) if smem else 0
    return {name: KernelResources(**values) for name, values in found.items()}
