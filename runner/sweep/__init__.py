"""Many runs as one: Hydra's callback that makes a multirun an MLflow parent run with its jobs as
children, and the GPU pool that gives each parallel job a GPU of its own.

Depends on recorded data (`runner.record`, `runner.results`), never on the run pipeline.
"""
