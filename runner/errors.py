"""The one exception a run ends with when it cannot go on: a reason a person can act on."""


class RunError(Exception):
    """A run that cannot be done or did not verify. `str()` is the one-line reason."""

    def artifacts(self) -> dict[str, str]:
        """Files to record with the failed run (name -> text): none unless a subclass has some."""
        return {}


class VerificationError(RunError):
    """The kernel's result is wrong: the run is recorded as failed and never reported as fast."""


class ImpossibleResult(RunError):
    """A rate the device cannot reach (above its ceiling, runner/run/peak.py): the timed launches
    did not do the work the run counts. Recorded FAILED with status `impossible`."""


class Refused(RunError):
    """A configuration refused before anything is compiled: a parameter outside its allowed values,
    a failing constraint of the kernel's spec, a size out of range, or more than the device allows.
    In a sweep these are counted apart from failures: they are the spec doing its job."""


class BuildError(RunError):
    """A kernel source the compiler refused. `str()` is the compiler's first error with the
    source's file name and line; `log` is the compiler's whole log, for the failed run's record."""

    def __init__(self, reason: str, log: str):
        super().__init__(reason)
        self.log = log

    def artifacts(self) -> dict[str, str]:
        """Files to record with the failed run: name (as in a successful run) -> text."""
        return {"compile_log.txt": self.log or "(the compiler printed nothing)\n"}
