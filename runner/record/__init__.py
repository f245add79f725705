"""The MLflow side of a run: the store (created once, under a lock), the recorder of one run, and
resume (a measurement taken before is reused, never repeated); `names`, every recorded name,
which every floor reads.

Imports configs and backends (what a run measures and what its measurement key is made of),
MLflow, and what any floor may read (`runner.errors`, `runner.terminal.interrupts`); its imports
of the floors above it are listed with their reasons in docs/architecture.md.
"""
