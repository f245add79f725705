"""Many runs as one: Hydra's callback that makes a multirun an MLflow parent run with its jobs as
children, the GPU pool that gives each parallel job a GPU of its own, and the searches' sampler
that draws only configurations a kernel's spec accepts.

Depends on recorded data (`runner.record`, `runner.results`) and on configs (`runner.config`, to
plan a configuration before drawing it), never on the run pipeline.
"""
