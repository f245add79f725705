"""Many runs as one: Hydra's callback that makes a multirun an MLflow parent run with its jobs as
children (`callback`: the parent's life; `summary`, `series`, `bookkeeping`, `monitor`,
`report_hook`: what it counts, draws, prints and writes on the parent; `definition`: what is
swept), what a job knows of its sweep (`context`), the GPU pool that gives each parallel job a
GPU of its own, the compile pool (`precompile`), and the searches' sampler that draws only
configurations a kernel's spec accepts.

The floor below the entry points (docs/architecture.md): imports the job (`runner.job`, to warm
the first worker), the records (`runner.record`, `runner.results`), configs and backends; a
job's own run (runner/app.py) reads only `context` and `gpu_pool`.
"""
