"""A report's plots, one PNG each and only where there is data: rate against size with the
vendor's line, the ladder as bars with % of vendor, registers and spills per step, OpenCL
against CUDA on the same device. Each takes the table of runs the page is built from
(runner/results/report_page.py, `best_per_cell`)."""

import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only; no screen needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from runner.record import names  # noqa: E402
from runner.results.records import is_gemm as _is_gemm  # noqa: E402
from runner.results.records import rate as _rate  # noqa: E402
from runner.results.records import reference as _reference  # noqa: E402
from runner.results.records import vendor_rate as _vendor_rate  # noqa: E402
from runner.results.report_page import (  # noqa: E402
    fmt_rate,
    largest_common_size,
    size_key,
    step_key,
    unit_of,
)


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
        for index, kernel in enumerate(sorted(series, key=step_key)):
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
        ax.set_ylabel(unit_of(is_gemm))
        ax.set_title(f"{backend} on {device}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.suptitle(_wrapped(f"{_devices(table)}: {title}, rate against size", fig), fontsize=12)
    return _save(fig, path)


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
        size = largest_common_size(cells)
        if size is not None:
            runs = {k: r for (k, s), r in cells.items() if s == size and _rate(r) is not None}
            panels.append((backend, device, is_gemm, size, runs))
    if not panels:
        return None
    width = max(6.0, 0.75 * max(len(p[4]) for p in panels) + 2)
    fig, axes = _grid(len(panels), width, 4.8)
    for ax, (backend, device, is_gemm, size, runs) in zip(axes, panels):
        kernels = sorted(runs, key=step_key)
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
            ax.annotate(f"{name if is_gemm else 'device copy'}: {fmt_rate(_median(vendor))}",
                        (-0.4, _median(vendor)), xytext=(0, 2), textcoords="offset points",
                        ha="left", va="bottom", fontsize=8)
        if tf32:  # cuBLAS in TF32 mode, over the steps it was measured for
            name = runs[kernels[tf32_at[0]]].data.tags.get(names.VENDOR_TF32_NAME,
                                                          "cuBLAS TF32")
            for first, last in _runs_of_positions(tf32_at):
                line = ax.hlines(_median(tf32), first - 0.45, last + 0.45, colors="tab:red",
                                 linestyles=":", linewidth=2.0, label=name)
            legend.append(line)
            ax.annotate(f"{name}: {fmt_rate(_median(tf32))}", (tf32_at[-1] + 0.45, _median(tf32)),
                        xytext=(0, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=8, color="tab:red")
        if is_gemm and legend:
            ax.legend(handles=legend, loc="upper left", fontsize=7, framealpha=0.9)
        ax.set_ylim(0, top * (1.3 if is_gemm else 1.12))  # room for the legend over low bars
        _thousands(ax)
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels(kernels, rotation=30 if len(kernels) > 4 else 0, ha="right"
                           if len(kernels) > 4 else "center", fontsize=9)
        ax.set_ylabel(unit_of(is_gemm))
        ax.set_title(f"{backend} on {device}, {size} (label: % of the library of the step's "
                     "precision)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_wrapped(f"{_devices(table)}: {title}, the ladder", fig), fontsize=12)
    return _save(fig, path)


def _resource_runs(cells: dict) -> dict:
    """kernel -> the run its resources are read from: the one at the largest size."""
    chosen = {}
    for (kernel, size), run in cells.items():
        if kernel not in chosen or size_key(size) > size_key(chosen[kernel][0]):
            chosen[kernel] = (size, run)
    return {k: run for k, (_, run) in chosen.items()}


def plot_resources(title: str, table: dict, path: Path) -> Optional[Path]:
    """Registers and spill bytes per step, a bar per backend and device; absent is 'n/a'."""
    groups = {key: _resource_runs(cells) for key, cells in sorted(table.items())}
    metrics = (names.REGISTERS, names.SPILL_BYTES)
    if not any(r.data.metrics.get(m) is not None
               for runs in groups.values() for r in runs.values() for m in metrics):
        return None
    kernels = sorted({k for runs in groups.values() for k in runs}, key=step_key)
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
            size = largest_common_size({k: sides["cuda"][k] for k in both})
            kernels = sorted({k for k, s in both if s == size}, key=step_key)
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
        ax.set_ylabel(unit_of(is_gemm))
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
