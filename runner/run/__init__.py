"""One measured run inside the process that owns the device: `execute` runs the stages in order,
each in a module beside it: the program compiled and bound (`kernel_program`), one launch
verified (`verify`), timed with device events (`timing`), the vendor library measured
(`vendor`), and what is recorded beside the time (`figures`).

Imports `runner.config`, `runner.backends`, `runner.inspect.program` and the recorded names
(`runner.record.names`); it never touches MLflow (it reports to whatever recorder it is handed)
and never the sweep, but for the compile pool's own compile (`ahead`, its reason beside it).
"""
