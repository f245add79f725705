"""The seeds' published tables next to the same rows measured here: one page per table.

    python -m runner.seed_tables <table>|all [--uri sqlite:///mlflow.db] [--out docs/seeds]
                                 (pages go to ./gemmlab-pages unless --out names a folder)
                                 [--backend cuda] [--device H200]
    python -m runner.seed_tables --write-configs

A table is data, `conf/seeds/<table>.yaml`: the seed document it comes from, the seed's devices
and sizes (its published columns), and one row per published row with the step and parameters
of ours that measure it, the published figures and a note where ours is not the same algorithm.
`--write-configs` turns each row into an option of the config group `seed_row/<table>` (a
`# @package _global_` file choosing the kernel and its parameters) and writes the sweep preset
`conf/experiment/seed_<table>.yaml` over those options, so one command measures the table:

    python -m runner -m +experiment=seed_<table> backend=cuda

The page reads the runs of experiment `seed_<table>` from MLflow, takes the newest measured run
per row, size, backend and device (a run belongs to a row when its kernel and every tiling value
match), and writes `<out>/<table>.md` and `<out>/<table>.png`: the published figure and device
beside ours, as a rate and as % of a reference measured alongside (the vendor library in the
same run, or the table's reference row), which is what makes different devices comparable; the
device, driver, date, runner version and commit, the command that measured and the command that
wrote the page.
"""

import argparse
import datetime as dt
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from runner.config.paths import CONF_DIR
from runner.record import names
from runner.results import runs as recorded
from runner.results.records import is_gemm as _is_gemm
from runner.results.records import rate as _rate
from runner.results.records import status
from runner.results.records import vendor_rate as _vendor_rate
from runner.results.runs import MEASURED

TABLES_DIR = CONF_DIR / "seeds"
ROWS_DIR = CONF_DIR / "seed_row"
EXPERIMENTS_DIR = CONF_DIR / "experiment"


# ---------------------------------------------------------------- the tables as data

@dataclass
class Column:
    """A published column: the seed's device and size, and its vendor figure if it gives one."""
    id: str
    device: str  # as the seed names it
    size: int
    label: Optional[str] = None  # short, for headers and legends (default: the device)
    vendor: Optional[float] = None


@dataclass
class Row:
    id: str  # file-safe: the option name in conf/seed_row/<table>/
    seed: str  # the row as the seed names it
    kernel: str
    params: dict  # the row's tiling values (the kernel's defaults fill the rest)
    published: dict = field(default_factory=dict)  # column id -> rate, or {rate, pct}
    note: Optional[str] = None

    def published_rate(self, column: str) -> Optional[float]:
        value = self.published.get(column)
        return value.get("rate") if isinstance(value, dict) else value

    def published_pct(self, column: str) -> Optional[float]:
        value = self.published.get(column)
        return value.get("pct") if isinstance(value, dict) else None


@dataclass
class Table:
    name: str
    title: str
    source: dict
    unit: str
    reference: dict  # label, text, and `row` where % is of a row of the table, not the vendor
    sizes: list
    timing: dict
    columns: list
    rows: list
    published_note: Optional[str] = None
    common_note: Optional[str] = None

    @property
    def experiment(self) -> str:
        return f"seed_{self.name}"

    @property
    def reference_row(self) -> Optional[str]:
        return self.reference.get("row")

    def row(self, row_id: str) -> Row:
        return next(r for r in self.rows if r.id == row_id)


def table_names() -> list[str]:
    return sorted(p.stem for p in TABLES_DIR.glob("*.yaml"))


def kernel_defaults(kernel: str) -> dict:
    return dict(yaml.safe_load((CONF_DIR / "kernel" / f"{kernel}.yaml").read_text())["params"])


def full_params(row: Row) -> dict:
    """Every tiling value the row runs with: the kernel's defaults, then the row's own."""
    return {**kernel_defaults(row.kernel), **row.params}


def load_table(name: str) -> Table:
    path = TABLES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise recorded.NoRuns(f"no seed table {name!r} (allowed: {', '.join(table_names())}, "
                              "or all)")
    data = yaml.safe_load(path.read_text())
    columns = [Column(**c) for c in data.get("published") or []]
    rows = [Row(**r) for r in data["rows"]]
    known = {c.id for c in columns}
    for row in rows:
        unknown = set(row.published) - known
        if unknown:
            raise recorded.NoRuns(f"{path}: row {row.id} publishes for unknown columns "
                                  f"{sorted(unknown)} (allowed: {sorted(known)})")
    table = Table(name=name, title=data["title"], source=data["source"], unit=data["unit"],
                  reference=data["reference"], sizes=list(data["measure"]["sizes"]),
                  timing=dict(data["measure"]["timing"]), columns=columns, rows=rows,
                  published_note=data.get("published_note"),
                  common_note=data.get("common_note"))
    if table.reference_row and table.reference_row not in {r.id for r in rows}:
        raise SystemExit(f"{path}: reference row {table.reference_row!r} is not a row")
    return table


# ---------------------------------------------------------------- the sweep presets

def row_config(table: Table, row: Row) -> str:
    params = ", ".join(f"{k}: {v}" for k, v in row.params.items())
    return (f"# @package _global_\n"
            f"# {table.title}: the seed's row {row.seed}\n"
            f"# Generated from conf/seeds/{table.name}.yaml by "
            f"`python -m runner.seed_tables --write-configs`; edit that file instead.\n"
            f"defaults:\n  - override /kernel: {row.kernel}\n"
            f"kernel:\n  params: {{{params}}}\n")


def experiment_config(table: Table) -> str:
    sizes = ",".join(str(s) for s in table.sizes)
    rows = ",".join(r.id for r in table.rows)
    return (f"# @package _global_\n"
            f"# {table.title}: every row of the seed's table, measured here\n"
            f"#   python -m runner -m +experiment={table.experiment} backend=cuda\n"
            f"#   python -m runner -m +experiment={table.experiment} backend=opencl "
            f"backend.platform=NVIDIA\n"
            f"# then: python -m runner.seed_tables {table.name}   (docs/seeds/{table.name}.md)\n"
            f"# Generated from conf/seeds/{table.name}.yaml by "
            f"`python -m runner.seed_tables --write-configs`; edit that file instead.\n"
            f"defaults:\n  - /seed_row/{table.name}: {table.rows[0].id}\n"
            f"hydra:\n  sweeper:\n    params:\n"
            f"      seed_row/{table.name}: {rows}\n"
            f"      size: {sizes}\n"
            f"tracking:\n  experiment: {table.experiment}\n"
            f"timing:\n  warmup: {table.timing['warmup']}\n  repeats: {table.timing['repeats']}\n")


def write_configs() -> list[Path]:
    """conf/seed_row/<table>/<row>.yaml and conf/experiment/seed_<table>.yaml for every table."""
    written = []
    for name in table_names():
        table = load_table(name)
        folder = ROWS_DIR / name
        folder.mkdir(parents=True, exist_ok=True)
        for stale in set(folder.glob("*.yaml")) - {folder / f"{r.id}.yaml" for r in table.rows}:
            stale.unlink()
        for row in table.rows:
            path = folder / f"{row.id}.yaml"
            path.write_text(row_config(table, row))
            written.append(path)
        path = EXPERIMENTS_DIR / f"{table.experiment}.yaml"
        path.write_text(experiment_config(table))
        written.append(path)
    return written


# ---------------------------------------------------------------- runs to rows

def _run_size(run) -> Optional[int]:
    """The square size of a run (M = N, and K too for SGEMM), else None."""
    p = run.data.params
    dims = {p.get(names.M), p.get(names.N)} | ({p.get(names.K)} if _is_gemm(run) else set())
    return int(dims.pop()) if len(dims) == 1 and None not in dims else None


def _row_of(run, table: Table, params_of: dict) -> Optional[Row]:
    p = run.data.params
    prefix = names.KERNEL_PARAMS_PREFIX
    tiling = {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)}
    for row in table.rows:
        if p.get(names.KERNEL_NAME) == row.kernel and tiling == params_of[row.id]:
            return row
    return None


@dataclass
class Matched:
    """The runs of one table's experiment, sorted onto its rows."""
    cells: dict  # (row id, size, (backend, device)) -> newest measured run
    failures: dict  # (row id, size, backend) -> newest failed or refused run (no measured one)
    groups: list  # (backend, device) with at least one measured run, sorted
    sizes: list  # sizes measured: the table's first, then any other (a quick run at 64)
    unmatched: int  # runs that are no row of the table (other parameters, or not square)


def match_runs(table: Table, runs: list) -> Matched:
    params_of = {r.id: {k: str(v) for k, v in full_params(r).items()} for r in table.rows}
    cells, failed, unmatched = {}, {}, 0
    for run in sorted(runs, key=lambda r: -r.info.start_time):  # newest first
        row, size = _row_of(run, table, params_of), _run_size(run)
        if row is None or size is None:
            unmatched += 1
            continue
        backend = run.data.params.get(names.BACKEND_NAME, "?")
        state = status(run)
        if state in MEASURED and _rate(run) is not None:
            key = (row.id, size, (backend, run.data.tags.get(names.DEVICE_NAME, "?")))
            cells.setdefault(key, run)
        elif state in ("failed", "refused", "impossible", "timeout"):
            failed.setdefault((row.id, size, backend), run)
    measured = {(r, s, b) for r, s, (b, _) in cells}
    failures = {k: v for k, v in failed.items() if k not in measured}
    groups = sorted({g for _, _, g in cells})
    measured_sizes = {s for _, s, _ in cells}
    sizes = [s for s in table.sizes if s in measured_sizes]
    sizes += sorted(measured_sizes - set(sizes))
    return Matched(cells, failures, groups, sizes, unmatched)


# ---------------------------------------------------------------- figures

def published_pct(table: Table, row: Row, column: Column) -> Optional[float]:
    """% of the reference as published: given by the seed, or from its vendor row, or from the
    table's reference row in the same column."""
    given = row.published_pct(column.id)
    if given is not None:
        return given
    rate = row.published_rate(column.id)
    if rate is None:
        return None
    if column.vendor:
        return 100.0 * rate / column.vendor
    if table.reference_row:
        reference = table.row(table.reference_row).published_rate(column.id)
        return 100.0 * rate / reference if reference else None
    return None


def our_pct(table: Table, matched: Matched, row: Row, size: int, group) -> Optional[float]:
    """% of the reference as measured: the vendor in the same run, or the reference row's run
    of the same sweep on the same backend, device and size."""
    run = matched.cells.get((row.id, size, group))
    if run is None:
        return None
    if table.reference_row:
        reference = matched.cells.get((table.reference_row, size, group))
        return 100.0 * _rate(run) / _rate(reference) if reference and _rate(reference) else None
    return run.data.metrics.get(names.PCT_OF_VENDOR)


def _fmt_rate(value: Optional[float]) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _fmt_pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.1f}%"


def _short(device: str) -> str:
    for prefix in ("NVIDIA GeForce ", "NVIDIA Tesla ", "NVIDIA "):
        if device.startswith(prefix):
            return device[len(prefix):]
    return device


def _our_label(group, size: int) -> str:
    backend, device = group
    return f"ours: {backend}, {_short(device)}, {size}"


def _published_label(column: Column) -> str:
    return f"published: {column.label or _short(column.device)}, {column.size}"


# ---------------------------------------------------------------- the page

def render_page(table: Table, matched: Matched, uri: str, command: str,
                image: Optional[str]) -> str:
    ours = [(g, s) for g in matched.groups for s in matched.sizes
            if any((r.id, s, g) in matched.cells for r in table.rows)]
    ref = f"% of {table.reference['label']}"
    vendors = recorded.vendor_names(list(matched.cells.values()))
    # Ours is % of the vendor library the runs timed beside each kernel (numpy on a CPU, not
    # the published cuBLAS), or of the table's reference row measured in the same sweep.
    our_ref = ref if table.reference_row or not vendors else f"% of {', '.join(vendors)}"
    source = table.source
    lines = [f"# {table.title}, reproduced", "",
             f"Published: {source['document']} — {source['what']}.", ""]
    if table.columns:
        lines += ["Published on: " + "; ".join(f"{c.device} at {c.size}" for c in table.columns)
                  + ".", ""]
    if table.published_note:
        lines += [f"Published figures: {table.published_note}", ""]
    lines += [f"Compared as: {table.reference['text']}", ""]
    if table.common_note:
        lines += [f"Every row: {table.common_note}.", ""]
    lines += [f"Page written on {dt.date.today().isoformat()} by `{command}`, from the MLflow "
              f"runs of experiment `{table.experiment}` in `{uri}` (the newest measured run per "
              "row, size, backend and device; every run verified its result before it was "
              "timed). Compare a published figure with ours at the same size.", ""]
    if not ours:
        lines += [f"**No measured runs yet.** Measure with "
                  f"`python -m runner -m +experiment={table.experiment} backend=cuda` (or "
                  "`backend=opencl backend.platform=NVIDIA`), then run the command above again.",
                  ""]

    # The table: published columns, then ours.
    head = ["seed row", "ours"]
    head += [f"{_published_label(c)}: {table.unit} ({ref})" for c in table.columns]
    head += [f"{_our_label(g, s)}: {table.unit} ({our_ref}"
             + ("; % of device copy)" if table.reference_row else ")") for g, s in ours]
    if not table.columns:
        head.insert(2, "published")
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * 2 + " ---: |" * (len(head) - 2)]
    notes = []
    for row in table.rows:
        step = f"`{row.kernel}`"
        if row.params:
            step += " " + ", ".join(f"{k}={v}" for k, v in row.params.items())
        if row.note:
            notes.append(row.note)
            step += f" [{len(notes)}]"
        cells = [row.seed, step]
        for column in table.columns:
            rate = row.published_rate(column.id)
            cells.append("—" if rate is None else
                         f"{_fmt_rate(rate)} ({_fmt_pct(published_pct(table, row, column))})")
        for group, size in ours:
            run = matched.cells.get((row.id, size, group))
            if run is None:
                failure = matched.failures.get((row.id, size, group[0]))
                cells.append(status(failure) if failure else "not measured")
                continue
            cell = f"{_fmt_rate(_rate(run))} ({_fmt_pct(our_pct(table, matched, row, size, group))}"
            if table.reference_row:
                cell += f"; {_fmt_pct(run.data.metrics.get(names.PCT_OF_VENDOR))}"
            cells.append(cell + ")")
        if not table.columns:
            cells.insert(2, "no figures in the seed")
        lines.append("| " + " | ".join(cells) + " |")
    # The vendor's own figures: what the percentages are of.
    vendor_cells = []
    for column in table.columns:
        vendor_cells.append(_fmt_rate(column.vendor) if column.vendor else "—")
    for group, size in ours:
        rates = sorted(_vendor_rate(r) for (_, s, g), r in matched.cells.items()
                       if g == group and s == size and _vendor_rate(r))
        vendor_cells.append(f"{_fmt_rate(rates[len(rates) // 2])} (median of its runs)"
                            if rates else "—")
    if any(c != "—" for c in vendor_cells):
        name = (", ".join(vendors) or "vendor SGEMM") if table.unit == "GFLOPS" \
            else "device copy"
        blank = "— | — | " if not table.columns else "— | "
        lines.append(f"| {name} | {blank}" + " | ".join(vendor_cells) + " |")
    lines.append("")
    for i, note in enumerate(notes, 1):
        lines.append(f"[{i}] {note}  ")
    if notes:
        lines.append("")
    if image:
        lines += [f"![{table.title}: ours against published, {ref}]({image})", ""]

    # Where and how ours was measured.
    for group in matched.groups:
        runs = [r for (_, _, g), r in matched.cells.items() if g == group]
        timing = sorted({f"{r.data.params.get(names.TIMING_WARMUP)} warm-up, "
                         f"{r.data.params.get(names.TIMING_REPEATS)} timed" for r in runs})
        lines += [f"## Ours: {group[0]} on {group[1]}", "",
                  *recorded.provenance(runs, uri, extra=(
                      f"- timing: {', '.join(timing)} launches (median shown)",)), ""]
    if matched.failures:
        lines += ["## Rows without a measurement", "",
                  "Recorded in MLflow with their reason and never timed:", ""]
        for (row_id, size, backend), run in sorted(matched.failures.items()):
            reason = run.data.tags.get(names.FAILURE_REASON, run.info.status)
            lines.append(f"- {table.row(row_id).seed} → `{table.row(row_id).kernel}` at {size}, "
                         f"{backend}: {status(run)}: {reason}")
        lines.append("")
    if matched.unmatched:
        lines += [f"{matched.unmatched} other run(s) of `{table.experiment}` match no row of the "
                  "table (other parameters, or M != N) and are left out.", ""]
    return "\n".join(lines)


def plot_table(table: Table, matched: Matched, path: Path) -> Optional[Path]:
    """Grouped bars per seed row: % of the reference, published (hatched) and ours (solid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []  # (label, values per row, hatched)
    for column in table.columns:
        series.append((_published_label(column),
                       [published_pct(table, r, column) for r in table.rows], True))
    for group in matched.groups:
        for size in matched.sizes:
            values = [our_pct(table, matched, r, size, group) for r in table.rows]
            if any(v is not None for v in values):
                series.append((_our_label(group, size), values, False))
    if not any(v is not None for _, values, _ in series for v in values):
        return None
    count = len(table.rows)
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.45 * count * len(series) + 3), 5.2))
    top = max(v for _, values, _ in series for v in values if v is not None)
    for i, (label, values, hatched) in enumerate(series):
        xs = [x - 0.4 + width * (i + 0.5) for x in range(count)]
        shown = [(x, v) for x, v in zip(xs, values) if v is not None]
        bars = ax.bar([x for x, _ in shown], [v for _, v in shown], width, label=label,
                      color=f"C{i}", hatch="//" if hatched else None,
                      edgecolor="white" if hatched else None)
        for bar, (_, v) in zip(bars, shown):
            ax.annotate(f"{v:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        fontsize=7)
    ax.axhline(100, color="k", linestyle="--", linewidth=1)
    ax.set_ylim(0, max(top, 100) * 1.15)
    ax.set_xticks(range(count))
    ax.set_xticklabels([r.id for r in table.rows], rotation=25 if count > 3 else 0,
                       ha="right" if count > 3 else "center", fontsize=8)
    vendors = recorded.vendor_names(list(matched.cells.values()))
    label = table.reference["label"]
    if not table.reference_row and vendors and vendors != [label]:
        label = f"the vendor library ({label} published; ours: {', '.join(vendors)})"
    ax.set_ylabel(textwrap.fill(f"% of {label} (same device and size)", 60))
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    what = ("published (hatched) and ours" if table.columns
            else "ours only, no figures published in the seed")
    ax.set_title(textwrap.fill(f"{table.title}: {what}", 70), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def build_page(table: Table, runs: list, out_dir: Path, uri: str, command: str) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    matched = match_runs(table, runs)
    image = plot_table(table, matched, out_dir / f"{table.name}.png")
    page = out_dir / f"{table.name}.md"
    page.write_text(render_page(table, matched, uri, command, image.name if image else None))
    return [page] + ([image] if image else [])


def _runs(table: Table, uri: str, backend: Optional[str], device: Optional[str]) -> list:
    """The table's runs; none (no store, no experiment, nothing on that backend or device) is
    an error that says how to measure, never a page with an empty table."""
    how = (f"measure with `python -m runner -m +experiment={table.experiment} backend=cuda` "
           "(or backend=opencl)")
    try:
        runs = recorded.select(recorded.load_runs(uri, table.experiment), backend, device)
    except recorded.NoRuns as error:
        raise recorded.NoRuns(f"{str(error.code).removeprefix('gemmlab: error: ')}; {how}")
    if not runs:
        raise recorded.NoRuns(f"no runs of {table.experiment} match --backend/--device in {uri}")
    return runs


def main(argv=None) -> list[Path]:
    from runner.results.report import check_uri, reading, writing

    parser = argparse.ArgumentParser(prog="python -m runner.seed_tables",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("table", nargs="?",
                        help=f"one of {', '.join(table_names())}, or all")
    parser.add_argument("--uri", default=recorded.DEFAULT_URI, help="MLflow tracking URI")
    parser.add_argument("--out", help=f"folder for the pages and plots (default: "
                                      f"./{recorded.DEFAULT_OUT}; the project's docs/seeds only "
                                      "when named here)")
    parser.add_argument("--backend", help="only this backend (opencl, cuda)")
    parser.add_argument("--device", help="only devices whose name contains this (any case)")
    parser.add_argument("--write-configs", action="store_true",
                        help="rewrite conf/seed_row/ and conf/experiment/seed_*.yaml from "
                             "conf/seeds/ and exit")
    args = parser.parse_args(argv)
    if args.write_configs:
        files = write_configs()
        print(f"wrote {len(files)} configs under {ROWS_DIR} and {EXPERIMENTS_DIR}")
        return files
    if args.table is None:
        parser.error("name a table (or all), or give --write-configs")
    names = table_names() if args.table == "all" else [args.table]
    tables = [load_table(name) for name in names]  # a name that is no table: before the store
    check_uri(args.uri)
    command = "python -m runner.seed_tables " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    files, out = [], recorded.out_folder(args.out)
    for name, table in zip(names, tables):
        try:
            runs = reading(args.uri, lambda: _runs(table, args.uri, args.backend, args.device))
        except recorded.NoRuns as error:
            if len(names) == 1:
                raise
            print(f"skipped {name}: {str(error.code).removeprefix('gemmlab: error: ')}")
            continue
        files += writing(out, lambda: build_page(table, runs, out, args.uri, command))
    if not files:
        raise recorded.NoRuns(f"no seed table has runs in {args.uri}")
    print(f"wrote {out}/: " + ", ".join(f.name for f in files))
    return files


if __name__ == "__main__":
    main()
