"""Run one kernel once on the Oclgrind simulator and print whether it verified.

Used by test_races.py in a subprocess: Oclgrind reads OCLGRIND_DATA_RACES when it loads, and it
writes its race reports to stderr. `--drop-barrier N` removes the N-th barrier of the source first,
so the test can show that a missing barrier is caught.
"""

import argparse
import sys
from pathlib import Path

import runner.execute
from conftest import compose_config
from runner.backends.opencl import OpenCLBackend
from runner.execute import checked_launch, prepare
from runner.operations import make_problem
from runner.spec import ProblemSize, plan_kernel

parser = argparse.ArgumentParser()
parser.add_argument("kernel")
parser.add_argument("size", help="MxNxK")
parser.add_argument("--drop-barrier", type=int, default=None)
parser.add_argument("--scratch", default=None, help="where to write an edited source")
parser.add_argument("overrides", nargs="*", help="config overrides, e.g. kernel.params.TS=32")
args = parser.parse_args()

if args.drop_barrier is not None:
    source = runner.execute.kernel_source_path("opencl", f"{args.kernel}.cl").read_text()
    parts = source.split("barrier(CLK_LOCAL_MEM_FENCE);")
    kept = parts[: args.drop_barrier + 1]
    edited = "barrier(CLK_LOCAL_MEM_FENCE);".join(kept) + "".join(
        ";" + part for part in parts[args.drop_barrier + 1:])
    path = Path(args.scratch)
    path.write_text(edited)
    runner.execute.kernel_source_path = lambda backend, name, *dirs: path

backend = OpenCLBackend(platform="Oclgrind")
cfg = compose_config(f"kernel={args.kernel}", *args.overrides)
plan = plan_kernel(cfg.kernel, ProblemSize(*(int(v) for v in args.size.split("x"))))
problem = make_problem(plan.operation, plan.size, seed=5)
prepared = prepare(backend, cfg.kernel.sources, plan, problem)
result = checked_launch(backend, prepared, problem, cfg.check, seed=5)
print(f"passed={result.passed} error={result.rel_error}")
sys.exit(0 if result.passed else 3)
