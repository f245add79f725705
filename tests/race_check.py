"""Run one kernel once and print whether it verified: on the Oclgrind simulator, or on a CUDA
GPU (under compute-sanitizer).

Used in a subprocess by test_races.py (Oclgrind reads OCLGRIND_DATA_RACES when it loads and
writes its race reports to stderr) and by test_sanitizer.py (`--backend cuda`, run under
`compute-sanitizer --tool memcheck|racecheck|synccheck`). `--drop-barrier N` removes the N-th
barrier of the source first, so the tests can show that a missing barrier is caught.
"""

import argparse
import sys
from pathlib import Path

from conftest import compose_config

import runner.run.execute
from runner.backends.opencl import OpenCLBackend
from runner.config.spec import ProblemSize, plan_kernel
from runner.run.execute import checked_launch, prepare
from runner.run.operations import effective_check, make_problem

parser = argparse.ArgumentParser()
parser.add_argument("kernel")
parser.add_argument("size", help="MxNxK")
parser.add_argument("--backend", choices=["oclgrind", "cuda"], default="oclgrind")
parser.add_argument("--drop-barrier", type=int, default=None)
parser.add_argument("--scratch", default=None, help="where to write an edited source")
parser.add_argument("overrides", nargs="*", help="config overrides, e.g. kernel.params.TS=32")
args = parser.parse_args()

language, suffix, barrier = (("cuda", "cu", "__syncthreads();") if args.backend == "cuda"
                             else ("opencl", "cl", "barrier(CLK_LOCAL_MEM_FENCE);"))
if args.drop_barrier is not None:
    source = runner.run.execute.kernel_source_path(language, f"{args.kernel}.{suffix}").read_text()
    parts = source.split(barrier)
    kept = parts[: args.drop_barrier + 1]
    edited = barrier.join(kept) + "".join(";" + part for part in parts[args.drop_barrier + 1:])
    path = Path(args.scratch)
    path.write_text(edited)
    runner.run.execute.kernel_source_path = lambda backend, name, *dirs: path

if args.backend == "cuda":
    from runner.backends.cuda import CUDABackend

    backend = CUDABackend(0)
else:
    backend = OpenCLBackend(platform="Oclgrind")
cfg = compose_config(f"kernel={args.kernel}", f"backend={language}", *args.overrides)
plan = plan_kernel(cfg.kernel, ProblemSize(*(int(v) for v in args.size.split("x"))))
problem = make_problem(plan.operation, plan.size, seed=5)
# No guard zones: the tool checks the bounds of each allocation, which guards would widen.
prepared = prepare(backend, cfg.kernel.sources, plan, problem, guards=False)
result = checked_launch(backend, prepared, problem, effective_check(cfg), seed=5)
print(f"passed={result.passed} error={result.rel_error}")
sys.exit(0 if result.passed else 3)
