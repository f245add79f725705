"""The one exception a run ends with when it cannot go on: a reason a person can act on."""


class RunError(Exception):
    """A run that cannot be done or did not verify. `str()` is the one-line reason."""


class VerificationError(RunError):
    """The kernel's result is wrong: the run is recorded as failed and never reported as fast."""


class Refused(RunError):
    """A configuration refused before anything is compiled: a parameter outside its allowed values,
    a failing constraint of the kernel's spec, a size out of range, or more than the device allows.
    In a sweep these are counted apart from failures: they are the spec doing its job."""
