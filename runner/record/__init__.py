"""The MLflow side of a run: the store (created once, under a lock), the recorder of one run, and
resume (a measurement taken before is reused, never repeated).

Imports `runner.config`, `runner.run.operations` (tolerances) and MLflow; nothing above.
"""
