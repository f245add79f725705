"""Device faults in words: the CUDA and OpenCL error names a faulting kernel leaves behind.

After such a fault the device context is unusable (CUDA's errors are sticky), so the worker that
holds it is never reused.
"""

from typing import Optional

from runner.errors import RunError

# (names in the driver's, CuPy's or pyopencl's message; what the kernel did)
_FAULTS = (
    (("ILLEGAL_ADDRESS", "IllegalAddress"), "made an illegal memory access"),
    (("MISALIGNED_ADDRESS", "MisalignedAddress"), "made a misaligned memory access"),
    (("ILLEGAL_INSTRUCTION", "IllegalInstruction"), "executed an illegal instruction"),
    (("HARDWARE_STACK_ERROR", "HardwareStackError"), "overflowed its call stack"),
    (("LAUNCH_OUT_OF_RESOURCES", "LaunchOutOfResources"),
     "needs more registers or resources per block than the device has for its launch"),
    (("LAUNCH_FAILED", "LaunchFailure", "UNKNOWN_ERROR"), "failed on the device (launch failure)"),
    # NVIDIA's OpenCL reports a faulting kernel as CL_OUT_OF_RESOURCES when it is waited for.
    (("OUT_OF_RESOURCES",), "failed on the device (OUT_OF_RESOURCES: most often an "
                            "out-of-bounds access)"),
)


# A launch the driver refuses for its resources is no fault: the backends say so themselves.
_REFUSALS = {"LAUNCH_OUT_OF_RESOURCES", "LaunchOutOfResources", "OUT_OF_RESOURCES"}


def describe_fault(error: BaseException) -> Optional[str]:
    """What the kernel did, when `error` (or an exception it came from) is a device fault.
    A RunError's own sentence (a backend's "refused to launch …") counts only for the faults
    that outlive the launch (an illegal address, say), not for a refused launch."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = f"{type(error).__name__}: {error}"
        for names, what in _FAULTS:
            if isinstance(error, RunError) and set(names) <= _REFUSALS:
                continue
            if any(name in text for name in names):
                return what
        error = error.__cause__ or error.__context__
    return None


def sanitizer_hint(backend_name: str) -> str:
    if backend_name == "cuda":
        return "run again with check.sanitizer=memcheck to find the line"
    return ("run again on the CPU with check.sanitizer=oclgrind to find the line, or with "
            "backend=cuda check.sanitizer=memcheck")
