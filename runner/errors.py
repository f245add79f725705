"""The one exception a run ends with when it cannot go on: a reason a person can act on."""


class RunError(Exception):
    """A run that cannot be done or did not verify. `str()` is the one-line reason."""


class VerificationError(RunError):
    """The kernel's result is wrong: the run is recorded as failed and never reported as fast."""
