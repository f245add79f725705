"""The acceptance measurements of "a recorded number a user can defend", as a page, from a store.

On a freshly started GPU host, in an empty folder (the commands the page quotes):

    python -m runner -m backend=cuda kernel=matmul_9,matmul_12,matmul_13,matmul_14 \
        shape=square_1024,square_4096,square_8192,4097x4095x4093,1000x1030x999 \
        tracking.inspect=false tracking.uri=sqlite:///trust.db tracking.experiment=first_sweep
    # the same again with tracking.experiment=second_sweep, then eleven A/A sweeps and matmul_8:
    python -m runner -m backend=cuda kernel=matmul_9 size=1024,4096 tracking.inspect=false \
        tracking.uri=sqlite:///trust.db tracking.experiment=aa_0        # … aa_10
    python -m runner -m backend=cuda kernel=matmul_8 size=1024,4096 tracking.inspect=false \
        tracking.uri=sqlite:///trust.db tracking.experiment=m8
    python docs/benchmarks/trust_checks.py --uri sqlite:///trust.db --out docs/benchmarks/trust_h100.md

The page: each job's % of cuBLAS in the first sweep against the second; ten A/A compares
(`gemmlab compare aa_i aa_i+1`); matmul_8 against matmul_9 (`--pair-by size`).
"""

import argparse
import datetime
from pathlib import Path

from mlflow.tracking import MlflowClient

from runner.record import names
from runner.results import compare


def jobs(client: MlflowClient, experiment: str) -> dict:
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], max_results=1000)
    return {(r.data.params[names.KERNEL_NAME],
             "x".join(r.data.params[k] for k in (names.M, names.N, names.K))): r
            for r in runs if r.data.tags.get(names.SWEEP) != "true"}


def pct(run, metric: str) -> str:
    value = run.data.metrics.get(metric)
    return "—" if value is None else f"{value:,.1f}"


def gap(a, b, metric: str):
    x, y = a.data.metrics.get(metric), b.data.metrics.get(metric)
    return None if x is None or y is None else y / x - 1


def page(uri: str, store_as: str) -> str:
    client = MlflowClient(uri)
    first, second = jobs(client, "first_sweep"), jobs(client, "second_sweep")
    some = next(iter(first.values()))
    tags = some.data.tags
    lines = [
        f"# Trust checks on an {tags[names.DEVICE_NAME]}",
        "",
        f"- device: {tags[names.DEVICE_NAME]}, {tags[names.DEVICE_DRIVER]}",
        f"- measured: {datetime.date.fromtimestamp(some.info.start_time / 1000)}, on a freshly "
        "started host (the first sweep is the GPU's first work)",
        f"- store: `{store_as}`; page: `python docs/benchmarks/trust_checks.py --uri {store_as}`",
        f"- first sweep: `{tags[names.COMMAND].replace(uri, store_as)}`; the second the same with "
        "`tracking.experiment=second_sweep`",
        "",
        "## The first sweep on a fresh host against the second",
        "",
        "| kernel | shape | % of cuBLAS SGEMM, first | second | gap | % of cuBLAS TF32, first "
        "| second | gap | % of peak | warm-up launches | checked / median |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    worst = {names.PCT_OF_VENDOR: 0.0, names.PCT_OF_VENDOR_TF32: 0.0}
    for key in sorted(first, key=lambda k: (k[0], [int(v) for v in k[1].split("x")])):
        a, b = first[key], second[key]
        cells = []
        for metric in (names.PCT_OF_VENDOR, names.PCT_OF_VENDOR_TF32):
            difference = gap(a, b, metric)
            if difference is not None:
                worst[metric] = max(worst[metric], abs(difference))
            cells += [pct(a, metric), pct(b, metric),
                      "—" if difference is None else f"{difference:+.2%}"]
        checked = a.data.metrics[names.TIME_MS_CHECKED] / a.data.metrics[names.TIME_MS_MEDIAN]
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) +
                     f" | {pct(a, names.PCT_OF_PEAK)} | "
                     f"{a.data.metrics[names.TIME_WARMUP_LAUNCHES]:.0f} | {checked:.3f} |")
    lines += ["", f"Largest gap: {worst[names.PCT_OF_VENDOR]:.2%} in % of cuBLAS SGEMM, "
                  f"{worst[names.PCT_OF_VENDOR_TF32]:.2%} in % of cuBLAS TF32.", ""]

    ids = [e.experiment_id for e in client.search_experiments()]
    lines += ["## Ten A/A compares", "",
              "`gemmlab compare aa_i aa_{i+1}`: the same code, matmul_9 at 1024 and 4096.", "",
              "| A | B | FASTER | SLOWER | SAME | UNCLEAR | speed ratios |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for i in range(10):
        result = compare.compare(client, compare.resolve(client, f"aa_{i}", ids),
                                 compare.resolve(client, f"aa_{i + 1}", ids))
        counts = result.counts()
        lines.append(f"| aa_{i} | aa_{i + 1} | {counts['FASTER']} | {counts['SLOWER']} | "
                     f"{counts['SAME']} | {counts['UNCLEAR']} | "
                     + ", ".join(f"{p.verdict.speedup:.4f}" for p in result.pairs) + " |")
    result = compare.compare(client, compare.resolve(client, "m8", ids),
                             compare.resolve(client, "aa_0", ids),
                             pair_by=("size", "backend", "device"))
    lines += ["", "## A real difference", "",
              "`gemmlab compare m8 aa_0 --pair-by size`: matmul_8 (A) against matmul_9 (B).", "",
              "| size | verdict | speed ratio (95% interval) |", "| --- | --- | --- |"]
    for pair in result.pairs:
        v = pair.verdict
        lines.append(f"| {'x'.join(pair.a.data.params[k] for k in (names.M, names.N, names.K))}"
                     f" | {v.verdict} | {v.speedup:.3f} ({v.low:.3f}–{v.high:.3f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="sqlite:///trust.db")
    parser.add_argument("--store-as", default="sqlite:///trust.db",
                        help="the store's name on the page, as the user's command gives it")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/trust_h100.md"))
    args = parser.parse_args()
    args.out.write_text(page(args.uri, args.store_as))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
