"""Results pages built from MLflow records, never from stdout: a Markdown page and PNG plots.

    python -m runner.report                      # the latest sweep in ./mlflow.db
    python -m runner.report --experiment sgemm_ladder [--uri sqlite:///mlflow.db] [--out pages]
    python -m runner.report --sweep <parent id, short id or name> [--backend cuda] [--device H200]

Pages go to ./gemmlab-pages/ (printed) unless `--out` names a folder; the project's own pages
in docs/ are rewritten only when `--out docs/…` is given.

For each backend and device: the latest finished run of every kernel and size, with its rate,
its % of the vendor library of its own precision in the same run (cuBLAS TF32 for a TF32 step,
cuBLAS SGEMM for FP32 and 3xTF32, numpy on a CPU, the device copy for copies), registers,
spills, shared memory, error, the SM clock and whether the GPU or host was clean, and the
commit that measured it; failed and
refused runs with their reasons; the device, driver, date and the exact command that produced
the runs; one line per sweep (an MLflow parent run) with its counts. Plots, one PNG each and
only where there is data: rate against size with the vendor's line, the ladder as bars with
% of vendor, registers and spills per step, OpenCL against CUDA on the same device.

`build_report(runs, title, out_dir, uri)` is the same page for a list of runs already in hand
(what a sweep calls at its end to log the page on its parent run).
"""

import argparse
import datetime as dt
import re
import shlex
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only; no screen needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from runner.record import names  # noqa: E402
from runner.results import runs as recorded  # noqa: E402
from runner.results.records import clock as _clock  # noqa: E402
from runner.results.records import commit as _commit  # noqa: E402
from runner.results.records import hygiene as _hygiene  # noqa: E402
from runner.results.records import is_gemm as _is_gemm  # noqa: E402
from runner.results.records import pct_cell as _pct_cell  # noqa: E402
from runner.results.records import rate as _rate  # noqa: E402
from runner.results.records import reference as _reference  # noqa: E402
from runner.results.records import size_label as _size_label  # noqa: E402
from runner.results.records import status  # noqa: E402
from runner.results.records import vendor_rate as _vendor_rate  # noqa: E402
from runner.results.runs import MEASURED, as_read_from, provenance  # noqa: E402,F401

STATUSES = ("ok", "refused", "failed", "cached")


# ---------------------------------------------------------------- tables

def _step_key(kernel: str):
    family, _, step = kernel.rpartition("_")
    return (family, int(step) if step.isdigit() else 0)


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _fmt_rate(value) -> str:
    """Thousands separated; three significant digits below 100 (a CPU's few GFLOPS)."""
    return _fmt(value, ",.0f" if value is None or abs(value) >= 100 else ".3g")


def _size_key(size: str):
    return tuple(int(v) for v in re.findall(r"\d+", size))


def _unit(is_gemm: bool) -> str:
    return "GFLOPS" if is_gemm else "GB/s"


def latest_per_cell(runs, best: bool = False) -> dict:
    """(backend, device) -> {(kernel, size label): newest measured run (ok or cached)}; with
    `best`, the fastest instead (a tiling sweep: its best configuration per step and size)."""
    table = defaultdict(dict)
    for run in sorted(runs, key=lambda r: -r.info.start_time):
        if status(run) not in MEASURED:
            continue
        params = run.data.params
        key = (params.get(names.BACKEND_NAME, "?"), run.data.tags.get(names.DEVICE_NAME, "?"))
        cell = (params.get(names.KERNEL_NAME, "?"), _size_label(run))
        held = table[key].get(cell)
        if held is None or (best and (_rate(run) or 0) > (_rate(held) or 0)):
            table[key][cell] = run
    return dict(table)


def failures(runs) -> list[str]:
    """One line per failed or refused configuration (newest only): parameters and reason."""
    seen, lines = set(), []
    for run in sorted(runs, key=lambda r: -r.info.start_time):
        state = status(run)
        if state not in ("failed", "refused", "impossible", "timeout"):
            continue
        params = run.data.params
        tiling = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(params.items())
                           if k.startswith(names.KERNEL_PARAMS_PREFIX))
        key = (params.get(names.BACKEND_NAME), params.get(names.KERNEL_NAME), _size_label(run),
               tiling)
        if key in seen:
            continue
        seen.add(key)
        reason = run.data.tags.get(names.FAILURE_REASON, run.info.status)
        lines.append(f"- {key[0]} · {key[1]} at {key[2]} ({tiling}): {state}: {reason}")
    return lines


def sweep_lines(runs, uri: str) -> list[str]:
    """One line per sweep (parent run) behind the runs: its name, id and children's counts."""
    children = defaultdict(list)
    for run in runs:
        parent = run.data.tags.get(names.PARENT_RUN_ID)
        if parent:
            children[parent].append(run)
    if not children:
        return []
    client = recorded.client(uri)
    lines = []
    for parent_id, kids in sorted(children.items(), key=lambda c: -min(r.info.start_time
                                                                       for r in c[1])):
        try:
            name = client.get_run(parent_id).info.run_name
        except Exception:  # the parent is gone or in a store we cannot read: still counted
            name = "?"
        counts = Counter(status(r) for r in kids)
        others = sorted(set(counts) - set(STATUSES))
        counted = ", ".join(f"{counts[s]} {s}" for s in (*STATUSES, *others))
        lines.append(f"- sweep `{name}` (run `{parent_id}`): {counted}")
    return ["Sweeps (counts among the runs on this page):", "", *lines, ""]


def summary_table(table: dict) -> list[str]:
    """Steps down, backend and size across: rate and % of the vendor library, at a glance."""
    columns = []
    for (backend, device), cells in sorted(table.items()):
        for size in sorted({size for _, size in cells}, key=_size_key):
            columns.append((backend, device, size))
    kernels = sorted({k for cells in table.values() for k, _ in cells}, key=_step_key)
    if not columns:
        return []
    several_devices = len({d for _, d, _ in columns}) > 1
    square = all(len(set(_size_key(s))) == 1 for _, _, s in columns)

    def head(backend, device, size):
        label = f"{backend} {size.split('x')[0] if square else size}"
        return f"{label} ({device})" if several_devices else label

    header = "| step | " + " | ".join(head(*c) for c in columns) + " |"
    lines = ["Rate (GFLOPS, or GB/s for copies) and % of the vendor library of the step's own "
             "precision in the same run (cuBLAS TF32 for a TF32 step, cuBLAS SGEMM for FP32 "
             "and 3xTF32); † not clean while timed (the GPU or host busy or held back, or the "
             "samples too noisy):", "",
             header, "| --- |" + " ---: |" * len(columns)]
    for kernel in kernels:
        row = []
        for backend, device, size in columns:
            run = table[(backend, device)].get((kernel, size))
            if run is None:
                row.append("—")
                continue
            row.append(f"{_fmt_rate(_rate(run))} ({_pct_cell(run, 0)})"
                       + (" †" if _hygiene(run) else ""))
        lines.append(f"| {kernel} | " + " | ".join(row) + " |")
    return lines + [""]


# What bounds each precision's rate: FP32 SIMT steps the FFMA pipe; a TF32 step the tensor
# cores through mma.sync or (Hopper) wgmma, whichever instruction it issues; 3xTF32 a third of
# either (three products a term).
CEILING_COLUMNS = [("FFMA", names.CEILING_FFMA, {"fp32": 1}),
                   ("mma.sync TF32", names.CEILING_MMA_TF32, {"tf32": 1, "tf32x3": 3}),
                   ("wgmma TF32", names.CEILING_WGMMA_TF32, {"tf32": 1, "tf32x3": 3})]


def ceiling_lines(table: dict, ceilings: dict) -> list[str]:
    """Each step at its backend's largest common size against the device's measured ceilings:
    the share of each pipe its precision can use (3xTF32 against a third of the TF32 pipe)."""
    lines = []
    for (backend, device), cells in sorted(table.items()):
        ceiling = ceilings.get(device)
        size = _largest_common_size(cells)
        if not ceiling or size is None:
            continue
        measured = ", ".join(f"{label} {ceiling[key]:,.1f}" for label, key, _ in CEILING_COLUMNS
                             if ceiling.get(key))
        lines += [f"## Against the ceilings: {backend} on {device}, {size}", "",
                  f"Ceilings measured by `python -m runner.ceiling` on the same device, in "
                  f"TFLOPS: {measured} (3xTF32: a third of a TF32 pipe, and of cuBLAS TF32). A "
                  "step uses only the pipe its instruction feeds: the TF32 steps 10 and 11 "
                  "`mma.sync`, 12, 13 and 14 `wgmma`.", "",
                  "| step | precision | GFLOPS | " + " | ".join(
                      f"% of {label}" for label, _, _ in CEILING_COLUMNS)
                  + " | % of cuBLAS TF32 in the run |",
                  "| --- | --- | ---: |" + " ---: |" * (len(CEILING_COLUMNS) + 1)]
        for (kernel, at), run in sorted(cells.items(), key=lambda c: _step_key(c[0][0])):
            rate = _rate(run)
            if at != size or rate is None or not _is_gemm(run):
                continue
            precision = run.data.params.get(names.KERNEL_PRECISION, "fp32")
            shares = []
            for _, key, divisors in CEILING_COLUMNS:
                pipe = ceiling.get(key)
                shares.append(f"{100 * rate * divisors[precision] / (pipe * 1000):.1f}"
                              if pipe and precision in divisors else "—")
            tf32 = run.data.metrics.get(names.VENDOR_TF32_GFLOPS)
            divisor = CEILING_COLUMNS[-1][2].get(precision)
            shares.append(f"{100 * rate * divisor / tf32:.1f}" if tf32 and divisor else "—")
            lines.append(f"| {kernel} | {precision} | {_fmt_rate(rate)} | "
                         + " | ".join(shares) + " |")
        lines.append("")
    return lines


def energy_lines(table: dict) -> list[str]:
    """The runs measured with `timing.energy_s`: the kernel's and the libraries' sustained rate,
    power and work per joule over launches back to back, in the same job, beside the rate."""
    rows = []
    for (backend, device), cells in sorted(table.items()):
        for (kernel, size), run in sorted(cells.items(),
                                          key=lambda c: (_step_key(c[0][0]), _size_key(c[0][1]))):
            m = run.data.metrics
            if m.get(names.ENERGY_GFLOPS_PER_WATT) is None:
                continue
            rows.append(
                f"| {kernel} | {size} | {backend} | {_fmt_rate(_rate(run))} | "
                f"{_fmt_rate(m.get('energy/gflops'))} | {_fmt(m.get('energy/power_w'), '.0f')} | "
                f"{_fmt(m.get(names.ENERGY_GFLOPS_PER_WATT), '.1f')} | "
                f"{_fmt(m.get('vendor_energy/power_w'), '.0f')} | "
                f"{_fmt(m.get('vendor_energy/gflops_per_watt'), '.1f')} | "
                f"{_fmt(m.get(names.X_VENDOR_PER_JOULE), '.2f')} | "
                f"{_fmt(m.get('vendor_tf32_energy/gflops_per_watt'), '.1f')} | "
                f"{_fmt(m.get(names.X_VENDOR_TF32_PER_JOULE), '.2f')} |")
    if not rows:
        return []
    return ["## Work per joule", "",
            "Runs with `timing.energy_s`: after its timed launches, the kernel ran back to back "
            "for that many seconds and more, and so did the vendor library in the same job; "
            "the power is NVML's energy counter (the whole board) between its steps inside "
            "each span. GFLOPS/W is GFLOP per joule; the rate under it is the sustained one, "
            "with the clock the power limit allows.", "",
            "| step | size | backend | GFLOPS (timed) | GFLOPS (sustained) | W | GFLOPS/W | "
            "library W | library GFLOPS/W | × per joule | cuBLAS TF32 GFLOPS/W | × TF32 per "
            "joule |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows, ""]


def _hygiene_cell(run) -> str:
    """What was not clean while timed; `clean` where it was watched and clean, else `—`."""
    tags = run.data.tags
    watched = names.GPU_HYGIENE in tags or names.HOST_HYGIENE in tags
    return _hygiene(run) or ("clean" if watched else "—")


def render_markdown(title: str, uri: str, table: dict, failed: list[str],
                    command: Optional[str] = None, sweeps: Optional[list[str]] = None,
                    images: Optional[list[tuple[str, str]]] = None,
                    ceilings: Optional[dict] = None) -> str:
    how = f"by `{command}` " if command else ""
    lines = [f"# Benchmark: {title}", "",
             f"Generated on {dt.date.today().isoformat()} {how}from MLflow runs read from "
             f"`{uri}` (the store the commands below recorded into). Every number comes from a "
             "run that verified its result first; the vendor baseline ran in the same run, on "
             "the same device and data. A step's time covers all its launches, a pre-pass or a "
             "pass that sums split-K slices included. Cached rows reuse the metrics of an "
             "earlier run.", ""]
    lines += sweeps or []
    lines += summary_table(table)
    for caption, name in images or []:
        lines += [f"![{caption}]({name})", ""]
    lines += ceiling_lines(table, ceilings or {})
    lines += energy_lines(table)
    for (backend, device), cells in sorted(table.items()):
        lines += [f"## {backend} on {device}", "",
                  *provenance(list(cells.values()), uri, commands_label="command(s)"), ""]
        units = {_unit(_is_gemm(r)) for r in cells.values()}
        rate = units.pop() if len(units) == 1 else "rate"
        lines += [f"| step | size | {rate} | reference | reference {rate} | % of reference | "
                  "time ms (median) | registers | spill bytes | shared bytes | error | "
                  "SM clock | GPU/host | commit |",
                  "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | "
                  "---: | --- | --- |"]
        for (kernel, size), run in sorted(cells.items(),
                                          key=lambda c: (_step_key(c[0][0]), _size_key(c[0][1]))):
            m = run.data.metrics
            error = "exact" if not _is_gemm(run) else _fmt(m.get(names.CHECK_REL_ERROR), ".1e")
            step = kernel
            if status(run) == "cached":
                step += f" (cached from `{run.data.tags.get(names.REUSED_FROM, '?')[:8]}`)"
            reference = _reference(run)
            lines.append(
                f"| {step} | {size} | {_fmt_rate(_rate(run))} | "
                f"{reference.name if reference else '—'} | "
                f"{_fmt_rate(reference.rate if reference else None)} | "
                f"{_fmt(reference.pct if reference else None, '.1f')} | "
                f"{_fmt(m.get(names.TIME_MS_MEDIAN), '.4f')} | "
                f"{_fmt(m.get(names.REGISTERS), '.0f')} | "
                f"{_fmt(m.get(names.SPILL_BYTES), '.0f')} | "
                f"{_fmt(m.get(names.SHARED_BYTES), '.0f')} | {error} | "
                f"{_clock(run) or '—'} | {_hygiene_cell(run)} | `{_commit(run)}` |")
        lines.append("")
    if failed:
        lines += ["## Failed runs", "",
                  "Recorded in MLflow with their reason and never timed (refused: rejected by "
                  "the kernel's constraints or the device's limits before compiling):",
                  "", *failed, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots

def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _panels(table: dict) -> list[tuple]:
    """(backend, device, is_gemm, cells) per panel: GFLOPS and GB/s never share an axis."""
    panels = []
    for (backend, device), cells in sorted(table.items()):
        for is_gemm in (True, False):
            part = {k: r for k, r in cells.items() if _is_gemm(r) == is_gemm}
            if part:
                panels.append((backend, device, is_gemm, part))
    return panels


def _devices(table: dict) -> str:
    return ", ".join(sorted({device for _, device in table}))


def _grid(count: int, width: float, height: float):
    cols = min(count, 2)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def _wrapped(text: str, fig) -> str:
    """A figure title broken into lines that fit the figure's width (a sweep's name is long)."""
    characters = max(40, int(fig.get_figwidth() * 9))
    return "\n".join(textwrap.wrap(text, characters))


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _x_of(run) -> tuple[float, bool]:
    """A size's place on the x axis and whether it is square (M = N = K, or M = N)."""
    p = run.data.params
    dims = [int(p.get(d, 0) or 0)
            for d in ((names.M, names.N, names.K) if _is_gemm(run) else (names.M, names.N))]
    product = 1
    for d in dims:
        product *= d
    return product ** (1 / len(dims)), len(set(dims)) == 1


def series_style(index: int) -> tuple[str, str, str]:
    """Colour, marker and line style of the index-th step of a panel: matplotlib's ten colours,
    then the same colours with triangles on dash-dot lines (the SGEMM ladder has 12 steps, and
    matmul_1, matmul_11 and matmul_2, matmul_12 must not look alike), then squares on dotted ones."""
    return (f"C{index % 10}", ("o", "^", "D")[index // 10 % 3], ("-", "-.", ":")[index // 10 % 3])


def plot_rates(title: str, table: dict, path: Path) -> Optional[Path]:
    """Rate against size for every step with the vendor's median line, one panel per backend
    and device (and per unit)."""
    panels = [p for p in _panels(table) if any(_rate(r) for r in p[3].values())]
    if not panels:
        return None
    fig, axes = _grid(len(panels), 7.5, 5)
    for ax, (backend, device, is_gemm, cells) in zip(axes, panels):
        series, vendor, square, vendor_name = defaultdict(list), defaultdict(list), True, None
        odd_vendor = set()   # sizes of the vendor's points that are not square
        tf32, tf32_name = defaultdict(list), None  # cuBLAS TF32, the TF32 steps' reference
        for (kernel, _), run in cells.items():
            x, is_square = _x_of(run)
            square &= is_square
            if _rate(run) is not None:
                series[kernel].append((x, _rate(run), is_square))
            found = _reference(run)
            if (is_gemm and found is not None and found.rate and found.pct is not None
                    and run.data.params.get(names.KERNEL_PRECISION) == "tf32"):
                tf32[x].append(found.rate)
                tf32_name = tf32_name or found.name
            if _vendor_rate(run):
                vendor[x].append(_vendor_rate(run))
                vendor_name = vendor_name or run.data.tags.get(names.VENDOR_NAME)
                if not is_square:
                    odd_vendor.add(x)
        # Lines join the square sizes; a shape that is not square (4097x4095x4093 next to 4096)
        # is an open marker of the same colour, so that no line jumps between the two. A panel
        # of odd shapes only joins them all.
        any_square = any(p[2] for points in series.values() for p in points)
        odd_seen = False
        for index, kernel in enumerate(sorted(series, key=_step_key)):
            points = sorted(series[kernel])
            joined = [p for p in points if p[2]] if any_square else points
            apart = [p for p in points if not p[2]] if any_square else []
            color, marker, linestyle = series_style(index)
            ax.plot([p[0] for p in joined], [p[1] for p in joined], color=color, marker=marker,
                    linestyle=linestyle, label=kernel)
            if apart:
                odd_seen = True
                ax.plot([p[0] for p in apart], [p[1] for p in apart], linestyle="none",
                        marker=marker, markerfacecolor="none", markeredgewidth=1.5, color=color)
        if vendor:
            # The baseline ran once per kernel run: its median over those runs, per size.
            label = (vendor_name or "vendor") if is_gemm else "device copy"
            xs = sorted(x for x in vendor if not (any_square and x in odd_vendor))
            ax.plot(xs, [_median(vendor[x]) for x in xs], "k--", marker="s", markersize=4,
                    linewidth=2, label=label)
            apart = sorted(x for x in odd_vendor if any_square)
            if apart:
                ax.plot(apart, [_median(vendor[x]) for x in apart], linestyle="none",
                        marker="s", markersize=5, markerfacecolor="none", color="k")
        if tf32:  # the TF32 steps' own reference, on the square sizes
            xs = sorted(x for x in tf32 if not (any_square and x in odd_vendor))
            ax.plot(xs, [_median(tf32[x]) for x in xs], color="k", linestyle=":",
                    marker="^", markersize=5, linewidth=2, label=tf32_name)
        if odd_seen:
            ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none", color="gray",
                    label="open: not square")
        xs = sorted({p[0] for points in series.values() for p in points} | set(vendor))
        ax.set_xscale("log", base=2)
        # An odd shape next to a power of two (4097x4095x4093 by 4096) gets no tick of its own:
        # the two labels would print over each other. Square sizes take the ticks first.
        square_xs = {p[0] for points in series.values() for p in points if p[2]}
        ticks = []
        for x in sorted(xs, key=lambda x: (x not in square_xs, x)):
            if all(abs(x - tick) > 0.05 * min(x, tick) for tick in ticks):
                ticks.append(x)
        ticks.sort()
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{x:.0f}" for x in ticks], rotation=30 if len(ticks) > 5 else 0)
        if len(xs) == 1:
            ax.set_xlim(xs[0] / 1.5, xs[0] * 1.5)
        ax.set_ylim(bottom=0)
        _thousands(ax)
        dims = "M = N = K" if is_gemm else "M = N"
        ax.set_xlabel(dims if square else
                      ("size: (M·N·K)^(1/3)" if is_gemm else "size: (M·N)^(1/2)"))
        ax.set_ylabel(_unit(is_gemm))
        ax.set_title(f"{backend} on {device}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.suptitle(_wrapped(f"{_devices(table)}: {title}, rate against size", fig), fontsize=12)
    return _save(fig, path)


def _largest_common_size(cells: dict) -> Optional[str]:
    """The largest size every step has; else the size most steps have (the largest of those)."""
    by_size = defaultdict(set)
    for (kernel, size), run in cells.items():
        if _rate(run) is not None:
            by_size[size].add(kernel)
    if not by_size:
        return None
    return max(by_size, key=lambda s: (len(by_size[s]), _size_key(s)))


def _bar_labels(ax, bars, labels, fontsize=8, inside_above=None):
    """A label on each bar: above it, or inside its top (white) when the bar is taller than
    `inside_above`, so that a line drawn across the bars near their tops cannot cover it; on a
    hatched bar, over a patch of the bar's own colour."""
    for bar, label in zip(bars, labels):
        if not label:
            continue
        inside = inside_above is not None and bar.get_height() > inside_above
        box = dict(facecolor=bar.get_facecolor(), edgecolor="none", pad=1.0) \
            if inside and bar.get_hatch() else None
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, -3 if inside else 2), textcoords="offset points", ha="center",
                    va="top" if inside else "bottom", fontsize=fontsize,
                    color="white" if inside else "black",
                    fontweight="bold" if inside else "normal", bbox=box)


def _thousands(ax):
    ax.yaxis.set_major_formatter(FuncFormatter(
        lambda v, _: f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:g}"))


def _pct(run) -> str:
    """A bar's label: the headline % (of the library of the step's own precision)."""
    found = _reference(run)
    return "" if found is None or found.pct is None else f"{found.pct:.0f}%"


# A bar's look by what its arithmetic is (the run's kernel.precision param): colour, hatching,
# legend label. A reduced-precision step must not pass for an FP32 one beside the FP32 vendor.
PRECISION_STYLE = {
    "fp32": ("tab:blue", "", "FP32"),
    "tf32": ("tab:orange", "//", "TF32, reduced precision"),
    "tf32x3": ("tab:green", "xx", "3xTF32, FP32-accurate"),
}


def _precision_style(run) -> tuple[str, str, str]:
    precision = run.data.params.get(names.KERNEL_PRECISION, "fp32")
    return PRECISION_STYLE.get(precision, ("tab:gray", "..", precision))


def _runs_of_positions(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) pairs: [9, 10, 11] -> [(9, 11)]."""
    spans: list[tuple[int, int]] = []
    for position in positions:
        if spans and position == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], position)
        else:
            spans.append((position, position))
    return spans


def plot_ladder(title: str, table: dict, path: Path) -> Optional[Path]:
    """The ladder as bars at the largest common size, % of vendor on each, the vendor dashed.
    SGEMM bars are coloured and hatched by precision (legend); where steps were also compared
    with cuBLAS in TF32 mode, its line is drawn across those steps only."""
    panels = []
    for backend, device, is_gemm, cells in _panels(table):
        size = _largest_common_size(cells)
        if size is not None:
            runs = {k: r for (k, s), r in cells.items() if s == size and _rate(r) is not None}
            panels.append((backend, device, is_gemm, size, runs))
    if not panels:
        return None
    width = max(6.0, 0.75 * max(len(p[4]) for p in panels) + 2)
    fig, axes = _grid(len(panels), width, 4.8)
    for ax, (backend, device, is_gemm, size, runs) in zip(axes, panels):
        kernels = sorted(runs, key=_step_key)
        styles = [_precision_style(runs[k]) if is_gemm else PRECISION_STYLE["fp32"]
                  for k in kernels]
        bars = ax.bar(range(len(kernels)), [_rate(runs[k]) for k in kernels],
                      color=[colour for colour, _, _ in styles], edgecolor="white")
        for bar, (_, hatch, _) in zip(bars, styles):
            bar.set_hatch(hatch)
        vendor = [_vendor_rate(r) for r in runs.values() if _vendor_rate(r)]
        tf32_at = [i for i, k in enumerate(kernels)
                   if runs[k].data.metrics.get(names.VENDOR_TF32_GFLOPS)] if is_gemm else []
        tf32 = [runs[kernels[i]].data.metrics[names.VENDOR_TF32_GFLOPS] for i in tf32_at]
        top = max([_rate(runs[k]) for k in kernels] + vendor + tf32)
        _bar_labels(ax, bars, [_pct(runs[k]) for k in kernels], inside_above=0.12 * top)
        legend = [Patch(facecolor=colour, hatch=hatch, edgecolor="white", label=label)
                  for colour, hatch, label in dict.fromkeys(styles)] if is_gemm else []
        if vendor:
            name = runs[kernels[0]].data.tags.get(names.VENDOR_NAME, "vendor")
            line = ax.axhline(_median(vendor), color="k", linestyle="--", linewidth=1.5,
                              label=name if is_gemm else "device copy")
            legend.append(line)
            # Named just above the line at the left, where a ladder's first bars are low.
            ax.annotate(f"{name if is_gemm else 'device copy'}: {_fmt_rate(_median(vendor))}",
                        (-0.4, _median(vendor)), xytext=(0, 2), textcoords="offset points",
                        ha="left", va="bottom", fontsize=8)
        if tf32:  # cuBLAS in TF32 mode, over the steps it was measured for
            name = runs[kernels[tf32_at[0]]].data.tags.get(names.VENDOR_TF32_NAME,
                                                          "cuBLAS TF32")
            for first, last in _runs_of_positions(tf32_at):
                line = ax.hlines(_median(tf32), first - 0.45, last + 0.45, colors="tab:red",
                                 linestyles=":", linewidth=2.0, label=name)
            legend.append(line)
            ax.annotate(f"{name}: {_fmt_rate(_median(tf32))}", (tf32_at[-1] + 0.45, _median(tf32)),
                        xytext=(0, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=8, color="tab:red")
        if is_gemm and legend:
            ax.legend(handles=legend, loc="upper left", fontsize=7, framealpha=0.9)
        ax.set_ylim(0, top * (1.3 if is_gemm else 1.12))  # room for the legend over low bars
        _thousands(ax)
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=30 if len(kernels) > 4 else 0, ha="right"
                           if len(kernels) > 4 else "center", fontsize=9)
        ax.set_ylabel(_unit(is_gemm))
        ax.set_title(f"{backend} on {device}, {size} (label: % of the library of the step's "
                     "precision)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_wrapped(f"{_devices(table)}: {title}, the ladder", fig), fontsize=12)
    return _save(fig, path)


def _resource_runs(cells: dict) -> dict:
    """kernel -> the run its resources are read from: the one at the largest size."""
    chosen = {}
    for (kernel, size), run in cells.items():
        if kernel not in chosen or _size_key(size) > _size_key(chosen[kernel][0]):
            chosen[kernel] = (size, run)
    return {k: run for k, (_, run) in chosen.items()}


def plot_resources(title: str, table: dict, path: Path) -> Optional[Path]:
    """Registers and spill bytes per step, a bar per backend and device; absent is 'n/a'."""
    groups = {key: _resource_runs(cells) for key, cells in sorted(table.items())}
    metrics = (names.REGISTERS, names.SPILL_BYTES)
    if not any(r.data.metrics.get(m) is not None
               for runs in groups.values() for r in runs.values() for m in metrics):
        return None
    kernels = sorted({k for runs in groups.values() for k in runs}, key=_step_key)
    width = max(7.0, 0.3 * len(kernels) * len(groups) + 2.5)
    fig, axes = plt.subplots(2, 1, figsize=(width, 7.5), squeeze=False)
    bar = 0.8 / len(groups)
    for ax, metric, label in zip(axes[:, 0], metrics,
                                 ("registers per thread", "spill bytes (stores + loads)")):
        highest = max([r.data.metrics.get(metric) or 0 for runs in groups.values()
                       for r in runs.values()] + [1])
        for g, ((backend, device), runs) in enumerate(groups.items()):
            xs = [i - 0.4 + bar * (g + 0.5) for i in range(len(kernels))]
            values = [runs[k].data.metrics.get(metric) if k in runs else None for k in kernels]
            shown = [(x, v) for x, v in zip(xs, values) if v is not None]
            bars = ax.bar([x for x, _ in shown], [v for _, v in shown], bar, color=f"C{g}")
            _bar_labels(ax, bars, [f"{v:.0f}" for _, v in shown], fontsize=7)
            for x, v, k in zip(xs, values, kernels):
                if v is None and k in runs:  # measured, but the driver did not say
                    ax.text(x, highest * 0.02, "n/a", ha="center", va="bottom", fontsize=7,
                            rotation=90, color=f"C{g}")
        ax.set_ylim(0, highest * 1.15)
        ax.set_xlim(-0.6, len(kernels) - 0.4)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of registers and bytes
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=30 if len(kernels) > 4 else 0,
                           ha="right" if len(kernels) > 4 else "center", fontsize=9)
        ax.set_ylabel(label)
        ax.grid(True, axis="y", alpha=0.3)
        # Handles drawn here: a backend with no value at all still gets its colour.
        one_backend_per_device = len(table) == len({b for b, _ in table})
        ax.legend(handles=[Patch(color=f"C{g}", label=b if one_backend_per_device
                                 else f"{b}, {d}") for g, (b, d) in enumerate(groups)],
                  fontsize=8, loc="upper left")
    axes[0, 0].set_title("n/a: the driver reports no value (not zero)", fontsize=9)
    fig.suptitle(_wrapped(f"{_devices(table)}: {title}, registers and spills per step", fig),
                 fontsize=12)
    return _save(fig, path)


def plot_backends(title: str, table: dict, path: Path) -> Optional[Path]:
    """OpenCL against CUDA per step on the same device, at the largest size both have."""
    panels = []
    devices = sorted({device for _, device in table})
    for device in devices:
        if ("opencl", device) not in table or ("cuda", device) not in table:
            continue
        for is_gemm in (True, False):
            sides = {b: {k: r for k, r in table[(b, device)].items() if _is_gemm(r) == is_gemm
                         and _rate(r) is not None} for b in ("opencl", "cuda")}
            both = {k for k in sides["opencl"] if k in sides["cuda"]}
            if not both:
                continue
            size = _largest_common_size({k: sides["cuda"][k] for k in both})
            kernels = sorted({k for k, s in both if s == size}, key=_step_key)
            panels.append((device, is_gemm, size, kernels, sides))
    if not panels:
        return None
    width = max(6.0, 0.9 * max(len(p[3]) for p in panels) + 2)
    fig, axes = _grid(len(panels), width, 4.8)
    for ax, (device, is_gemm, size, kernels, sides) in zip(axes, panels):
        for g, backend in enumerate(("opencl", "cuda")):
            runs = [sides[backend][(k, size)] for k in kernels]
            bars = ax.bar([i - 0.2 + 0.4 * g for i in range(len(kernels))],
                          [_rate(r) for r in runs], 0.4, label=backend, color=f"C{g}")
            _bar_labels(ax, bars, [_pct(r) for r in runs], fontsize=7)
        top = max(_rate(sides[b][(k, size)]) for b in sides for k in kernels)
        ax.set_ylim(0, top * 1.15)
        _thousands(ax)
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=30 if len(kernels) > 4 else 0,
                           ha="right" if len(kernels) > 4 else "center", fontsize=9)
        ax.set_ylabel(_unit(is_gemm))
        ax.set_title(f"{device}, {size} (label: % of the backend's library of the step's "
                     "precision)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(_wrapped(f"{', '.join(sorted({p[0] for p in panels}))}: {title}, "
                          "OpenCL against CUDA", fig),
                 fontsize=12)
    return _save(fig, path)


PLOTS = (("rate", "rate against size", plot_rates),
         ("ladder", "the ladder at the largest common size", plot_ladder),
         ("resources", "registers and spills per step", plot_resources),
         ("backends", "OpenCL against CUDA", plot_backends))


# ---------------------------------------------------------------- the page

def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "report"


def build_report(runs: list, title: str, out_dir: Path, uri: str, *, name: Optional[str] = None,
                 command: Optional[str] = None, best: bool = False,
                 ceilings: Optional[dict] = None) -> list[Path]:
    """Write `<out_dir>/<name>.md` and its PNGs for these runs; return every file, page first.

    `runs` are `mlflow.entities.Run` in any order (sweep parents are left out); `name` defaults
    to `title` made file-safe; `uri` is where they were read (quoted, and used to look up the
    names of their sweeps); `best` shows the fastest run per step and size rather than the
    newest (a sweep's page); `ceilings` (device name -> recorded ceilings, `runs.ceilings`) adds
    each step against its pipe's ceiling. Sets no global MLflow state."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = _stem(name or title)
    runs = sorted((r for r in runs if r.data.tags.get(names.SWEEP) != "true"),
                  key=lambda r: -r.info.start_time)
    table = latest_per_cell(runs, best=best)
    images = []
    for suffix, caption, plot in PLOTS:
        written = plot(title, table, out_dir / f"{stem}-{suffix}.png") if table else None
        if written is not None:
            images.append((f"{title}: {caption}", written))
    page = render_markdown(title, uri, table, failures(runs), command=command,
                           sweeps=sweep_lines(runs, uri),
                           images=[(c, p.name) for c, p in images], ceilings=ceilings)
    md = out_dir / f"{stem}.md"
    md.write_text(page)
    return [md, *(p for _, p in images)]


def _without_out(arguments: list[str]) -> list[str]:
    """The command as a page names it: where the page was written (`--out`, often a folder of
    the machine that made it) changes nothing on the page."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--out":
            skip = True
        elif not argument.startswith("--out="):
            kept.append(argument)
    return kept


def check_uri(uri: str) -> None:
    """`--uri` checked as the runner checks `tracking.uri`: a bare path (`x.db`) is refused with
    the sqlite form to give, a server must answer within seconds; NoRuns (one line) if not."""
    from runner.errors import RunError
    from runner.record.store import check_scheme, probe_server

    try:
        check_scheme(uri)
        if uri.startswith(("http://", "https://")):
            probe_server(uri)
    except RunError as error:
        raise recorded.NoRuns(f"--uri {uri}: " + str(error).replace("tracking.uri=", "--uri "))


def reading(uri: str, work):
    """`work()`, with an error of MLflow's while reading the store at `uri` as one line."""
    from mlflow.exceptions import MlflowException

    try:
        return work()
    except MlflowException as error:
        first = (str(error.message).strip().splitlines() or [type(error).__name__])[0]
        raise recorded.NoRuns(f"cannot read the MLflow store at --uri {uri}: {first}; "
                              "allowed: --uri sqlite:///<file>.db or http://host:5000") from None


def writing(out: Path, work):
    """`work()`, with an error creating or writing the `--out` folder as one line."""
    try:
        return work()
    except OSError as error:
        what = error.filename or out
        raise recorded.NoRuns(f"--out {out}: cannot write {what} ({error.strerror or error}); "
                              "allowed: a folder this user can create and write, e.g. "
                              f"--out {recorded.DEFAULT_OUT}") from None


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m runner.report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", help="MLflow experiment name (without it and --sweep: "
                                             "the latest sweep)")
    parser.add_argument("--sweep", help="a sweep's parent run id, its first characters (as "
                                        "pages name it) or its run name: only its children")
    parser.add_argument("--backend", help="only this backend (opencl, cuda)")
    parser.add_argument("--device", help="only devices whose name contains this (any case)")
    parser.add_argument("--name", help="page and file stem (default: the experiment's name, "
                                       "or sweep-<first 8 characters of the sweep's id>)")
    parser.add_argument("--uri", default=recorded.DEFAULT_URI, help="MLflow tracking URI")
    parser.add_argument("--out", help=f"folder for the page and plots (default: "
                                      f"./{recorded.DEFAULT_OUT}; docs/ only when named here)")
    args = parser.parse_args(argv)
    check_uri(args.uri)
    out = recorded.out_folder(args.out)
    files = reading(args.uri, lambda: _report(args, argv, out))
    print(f"wrote {out}/: " + ", ".join(f.name for f in files))
    return files


def _report(args, argv, out: Path) -> list[Path]:
    title, name, parent = args.experiment, args.name, None
    client = recorded.client(args.uri)
    if args.sweep is not None:
        parent = recorded.find_sweep(client, args.sweep,
                                     recorded.experiment_ids(client, args.experiment))
    elif args.experiment is None:  # the latest sweep in the store
        parent = recorded.latest_sweep(client, recorded.experiment_ids(client, None))
        if parent is None:
            raise recorded.NoRuns(f"no sweep in {args.uri}: give --experiment, or run a sweep "
                                  "(python -m runner -m …)")
    sweep = None
    if parent is not None:
        sweep = parent.info.run_id
        title = parent.info.run_name or sweep
        name = name or f"sweep-{sweep[:8]}"
    runs = recorded.select(recorded.load_runs(args.uri, args.experiment, sweep), args.backend,
                           args.device)
    if not runs:
        raise recorded.NoRuns("no runs match --backend/--device")
    command = "python -m runner.report " + shlex.join(
        _without_out(argv if argv is not None else sys.argv[1:]))
    ceilings = recorded.ceilings(args.uri, args.experiment)
    return writing(out, lambda: build_report(runs, title, out, args.uri,
                                             name=name or args.experiment, command=command,
                                             ceilings=ceilings))


if __name__ == "__main__":
    main()
