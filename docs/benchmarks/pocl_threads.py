"""Why two runs of the same kernel on PoCL's CPU device disagree: the run-to-run drift of one
kernel under several PoCL settings, alternated, each run a fresh process.

    python docs/benchmarks/pocl_threads.py --rounds 30 --kernel matmul_2 --size 128 \
        default affinity threads1 [--pause 5] [--out runs.jsonl]

Each run does what `python -m runner backend.device_type=cpu kernel=K size=S` does for its
timing (the runner's backend, compile and `measure`, warm-up 5 and 20 samples unless told),
under one setting, watched by the runner's host monitor (others' CPU use over the samples)
and by its threads' CPU time and last CPU (/proc/self/task: which threads did the work, and
where). Settings run A, B, C, A, B, C, … so that a change in what the host is doing meets them
all. The summary gives each setting's medians and their spread (largest over smallest), over
every run and over the runs whose host was clean (others under the `host shared` threshold).

Settings: default (PoCL as it comes: one worker thread per core), affinity (POCL_AFFINITY=1:
worker i pinned to CPU i), threads1 (POCL_MAX_PTHREAD_COUNT=1: one worker), warm200 (200
warm-up launches). Findings: docs/methodology.md#why-the-cpu-drifts-between-runs.
"""

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {
    "default": {},
    "affinity": {"env": {"POCL_AFFINITY": "1"}},
    "threads1": {"env": {"POCL_MAX_PTHREAD_COUNT": "1"}},
    "warm200": {"warmup": 200},
}


def _threads() -> dict:
    """Each thread of this process: (CPU ticks, the CPU it last ran on)."""
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[tid] = (int(stat[11]) + int(stat[12]), int(stat[36]))
    return found


def one_run(setting: str, kernel: str, size: int, warmup: int, repeats: int) -> dict:
    """One measurement in this process (the environment already set by the parent)."""
    import numpy as np
    from hydra import compose, initialize_config_dir
    from hydra_plugins.gemmlab_launcher import register as register_launchers

    from runner.backends import make_backend
    from runner.config.measurement import Repetitions, Warmup
    from runner.config.paths import CONF_DIR
    from runner.config.schema import register_configs
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.run.execute import prepare
    from runner.run.host_state import HostMonitor
    from runner.run.operations import make_problem
    from runner.run.timing import measure

    register_configs()
    register_launchers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config",
                      overrides=[f"kernel={kernel}", "backend.device_type=cpu"])
    plan = plan_kernel(cfg.kernel, ProblemSize(size, size, size))
    backend = make_backend(cfg.backend)
    problem = make_problem(plan.operation, plan.size, seed=0)
    prepared = prepare(backend, cfg.kernel.sources, plan, problem)
    before = _threads()
    with HostMonitor() as host:
        samples = measure(lambda: backend.time_ms(prepared.enqueue),
                          Warmup(SETTINGS[setting].get("warmup", warmup)), Repetitions(repeats),
                          setting, None)
    after = _threads()
    worked = sorted(([ticks - before.get(tid, (0, 0))[0], cpu]
                     for tid, (ticks, cpu) in after.items()), reverse=True)
    return {"setting": setting, "median_ms": float(np.median(samples)),
            "samples_ms": [float(s) for s in samples], "device": backend.device_info().name,
            "compute_units": backend.device_info().compute_units,
            "others": host.other_cpu_cores, "hygiene": host.hygiene,
            "threads": [w for w in worked if w[0]][:4]}


def summary(runs: list[dict]) -> list[str]:
    lines = []
    for setting in dict.fromkeys(run["setting"] for run in runs):
        mine = [run for run in runs if run["setting"] == setting]
        for label, chosen in (("all", mine),
                              ("clean", [r for r in mine if r["hygiene"] == "clean"])):
            medians = [run["median_ms"] for run in chosen]
            if medians:
                lines.append(f"{setting:9s} {label:5s} n={len(medians):3d} spread "
                             f"{max(medians) / min(medians):.2f}x  medians "
                             + " ".join(f"{m:.3f}" for m in medians))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", choices=sorted(SETTINGS))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--kernel", default="matmul_2")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between rounds")
    parser.add_argument("--out", help="append each run as a JSON line to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child, args.kernel, args.size, args.warmup,
                                 args.repeats)))
        return
    runs = []
    for round_ in range(args.rounds):
        time.sleep(args.pause)
        for setting in args.settings:
            env = {**os.environ, **SETTINGS[setting].get("env", {})}
            done = subprocess.run([sys.executable, __file__, setting, "--child", setting,
                                   "--kernel", args.kernel, "--size", str(args.size),
                                   "--warmup", str(args.warmup), "--repeats", str(args.repeats)],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            run = {"round": round_, "time": time.time(),
                   **json.loads(done.stdout.strip().splitlines()[-1])}
            runs.append(run)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(run) + "\n")
            print(f"round {round_:3d} {setting:9s} {run['median_ms']:.3f} ms  others "
                  f"{run['others'] if run['others'] is None else round(run['others'], 2)}  "
                  f"threads [ticks, last CPU] {run['threads']}", flush=True)
    print("\n".join(summary(runs)))


if __name__ == "__main__":
    main()
