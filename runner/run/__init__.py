"""One measured run inside the process that owns the device: build the problem, compile, verify
one launch, time with device events, measure the vendor library.

Imports `runner.config`, `runner.backends` and `runner.inspect.program`; it never touches MLflow
(it reports to whatever recorder it is handed) and never the sweep.
"""
