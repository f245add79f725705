"""Results pages built from MLflow records, never from stdout: a Markdown table and plots.

    python -m runner.report --experiment sgemm_ladder [--uri sqlite:///mlflow.db] [--out docs/benchmarks]

For each backend and device: the latest finished run of every kernel and size, with its rate,
% of the vendor library in the same run, registers, spills, shared memory and error; failed runs
with their reasons; the device, driver, date and the exact command that produced the runs.
"""

import argparse
import datetime as dt
import re
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no screen needed
import matplotlib.pyplot as plt  # noqa: E402
import mlflow  # noqa: E402


def _step_key(kernel: str):
    family, _, step = kernel.rpartition("_")
    return (family, int(step) if step.isdigit() else 0)


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def load_runs(uri: str, experiment: str) -> list:
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list",
                              order_by=["attributes.start_time DESC"])
    if not runs:
        raise SystemExit(f"no runs in experiment {experiment!r} at {uri}")
    return runs


def _size_label(run) -> str:
    params = run.data.params
    size = f"{params.get('M')}x{params.get('N')}"
    if run.data.tags.get("gemmlab.operation") == "sgemm":
        size += f"x{params.get('K')}"
    return size


def latest_per_cell(runs) -> dict:
    """(backend, device) -> {(kernel, size label): newest finished run}."""
    table = defaultdict(dict)
    for run in runs:  # newest first
        if run.info.status != "FINISHED":
            continue
        params = run.data.params
        key = (params.get("backend.name", "?"), run.data.tags.get("device.name", "?"))
        table[key].setdefault((params.get("kernel.name", "?"), _size_label(run)), run)
    return table


def failures(runs) -> list[str]:
    """One line per failed configuration (newest only), with its parameters and reason."""
    seen, lines = set(), []
    for run in runs:
        if run.info.status == "FINISHED":
            continue
        params = run.data.params
        tiling = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(params.items())
                           if k.startswith("kernel.params."))
        key = (params.get("backend.name"), params.get("kernel.name"), _size_label(run), tiling)
        if key in seen:
            continue
        seen.add(key)
        reason = run.data.tags.get("failure_reason", run.info.status)
        lines.append(f"- {key[0]} · {key[1]} at {key[2]} ({tiling}): {reason}")
    return lines


def _size_key(size: str):
    return tuple(int(v) for v in re.findall(r"\d+", size))


def render_markdown(experiment: str, uri: str, table: dict, failed: list[str]) -> str:
    lines = [f"# Benchmark: {experiment}", "",
             f"Generated on {dt.date.today().isoformat()} by `python -m runner.report "
             f"--experiment {experiment}` from the MLflow runs of that experiment (the store the "
             "commands below recorded into, read from `" + uri + "`). Every number comes from a "
             "run that verified its result first; the vendor baseline ran in the same run, on "
             "the same device and data.", ""]
    lines += summary_table(table)
    for (backend, device), cells in sorted(table.items()):
        sample = next(iter(cells.values()))
        tags = sample.data.tags
        started = dt.datetime.fromtimestamp(sample.info.start_time / 1000, dt.timezone.utc)
        commands = sorted({r.data.tags.get("gemmlab.command", "?") for r in cells.values()})
        lines += [f"## {backend} on {device}", "",
                  f"- driver: {tags.get('device.driver', '?')}",
                  f"- platform: {tags.get('device.platform', '?')}",
                  f"- vendor baseline: {tags.get('vendor.name', 'none')}",
                  f"- date (UTC): {started:%Y-%m-%d %H:%M}",
                  f"- runner: {tags.get('gemmlab.runner_version', '?')}, commit(s) "
                  + ", ".join(sorted({r.data.tags.get("gemmlab.git_commit", "?")
                                      for r in cells.values()})),
                  "- command(s):", *[f"  - `{c}`" for c in commands], ""]
        is_gemm = tags.get("gemmlab.operation") == "sgemm"
        rate = "GFLOPS" if is_gemm else "GB/s"
        lines += [f"| step | size | {rate} | vendor {rate} | % of vendor | time ms (median) | "
                  "registers | spill bytes | shared bytes | error |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for (kernel, size), run in sorted(cells.items(),
                                          key=lambda c: (_step_key(c[0][0]), _size_key(c[0][1]))):
            m = run.data.metrics
            value = m.get("perf/gflops") if is_gemm else m.get("bw/gbps")
            vendor = m.get("vendor/gflops") if is_gemm else m.get("vendor/gbps")
            error = "exact" if not is_gemm else _fmt(m.get("check/rel_error"), ".1e")
            lines.append(
                f"| {kernel} | {size} | {_fmt(value, ',.0f')} | {_fmt(vendor, ',.0f')} | "
                f"{_fmt(m.get('perf/pct_of_vendor'), '.1f')} | "
                f"{_fmt(m.get('time_ms/median'), '.4f')} | "
                f"{_fmt(m.get('kernel/registers'), '.0f')} | "
                f"{_fmt(m.get('kernel/spill_bytes'), '.0f')} | "
                f"{_fmt(m.get('kernel/shared_bytes'), '.0f')} | {error} |")
        lines.append("")
    if failed:
        lines += ["## Failed runs", "", "Recorded in MLflow with their reason and never timed:",
                  "", *failed, ""]
    return "\n".join(lines)


def summary_table(table: dict) -> list[str]:
    """Steps down, backend and size across: rate and % of the vendor library, at a glance."""
    columns = []
    for (backend, device), cells in sorted(table.items()):
        for size in sorted({size for _, size in cells}, key=_size_key):
            columns.append((backend, device, size))
    kernels = sorted({k for cells in table.values() for k, _ in cells}, key=_step_key)
    if not columns:
        return []
    header = "| step | " + " | ".join(f"{b} {s.split('x')[0]}" for b, _, s in columns) + " |"
    lines = ["Rate (GFLOPS, or GB/s for copies) and % of the vendor library in the same run:", "",
             header, "| --- |" + " ---: |" * len(columns)]
    for kernel in kernels:
        row = []
        for backend, device, size in columns:
            run = table[(backend, device)].get((kernel, size))
            if run is None:
                row.append("—")
                continue
            m = run.data.metrics
            rate = m.get("perf/gflops") or m.get("bw/gbps")
            row.append(f"{_fmt(rate, ',.0f')} ({_fmt(m.get('perf/pct_of_vendor'), '.0f')}%)")
        lines.append(f"| {kernel} | " + " | ".join(row) + " |")
    return lines + [""]


def plot(experiment: str, table: dict, path: Path) -> None:
    """Rate against size for every step, one panel per backend and device."""
    panels = sorted(table.items())
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for ax, ((backend, device), cells) in zip(axes[0], panels):
        series = defaultdict(list)
        vendor = {}
        vendor_name = "vendor"
        is_gemm = True
        for (kernel, size), run in cells.items():
            is_gemm = run.data.tags.get("gemmlab.operation") == "sgemm"
            m = run.data.metrics
            n = _size_key(size)[0]
            key = "perf/gflops" if is_gemm else "bw/gbps"
            series[kernel].append((n, m.get(key)))
            vkey = "vendor/gflops" if is_gemm else "vendor/gbps"
            if m.get(vkey):
                vendor.setdefault(n, []).append(m[vkey])
                vendor_name = run.data.tags.get("vendor.name", vendor_name)
        for kernel in sorted(series, key=_step_key):
            points = sorted(p for p in series[kernel] if p[1] is not None)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=kernel)
        if vendor:
            xs = sorted(vendor)
            # The baseline ran once per kernel run: its median over those runs, per size.
            ax.plot(xs, [sorted(vendor[x])[len(vendor[x]) // 2] for x in xs], "k--",
                    linewidth=2, label=vendor_name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M = N = K" if is_gemm else "M = N")
        ax.set_ylabel("GFLOPS" if is_gemm else "GB/s")
        ax.set_title(f"{experiment}: {backend} on {device}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", required=True, help="MLflow experiment name")
    parser.add_argument("--uri", default="sqlite:///mlflow.db", help="MLflow tracking URI")
    parser.add_argument("--out", default="docs/benchmarks", help="folder for the page and plot")
    args = parser.parse_args(argv)
    runs = load_runs(args.uri, args.experiment)
    table = latest_per_cell(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    page = render_markdown(args.experiment, args.uri, table, failures(runs))
    image = out / f"{args.experiment}.png"
    plot(args.experiment, table, image)
    page = page.replace("\n\n## ", f"\n\n![{args.experiment}]({image.name})\n\n## ", 1)
    (out / f"{args.experiment}.md").write_text(page)
    print(f"wrote {out / (args.experiment + '.md')} and {image}")


if __name__ == "__main__":
    main()
