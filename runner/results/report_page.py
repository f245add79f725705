"""A report's Markdown page (runner/results/report.py builds it with its plots): the best
measured run per step and size for each backend and device, its tiling, its rate, its % of the
vendor library of its own precision, its resources, error, clock, hygiene and commit; the sweeps
the runs came from; each step against its pipe's ceiling and its energy where recorded; failed
and refused runs with their reasons. Also the table the plots draw from (`best_per_cell`) and
the order and format both use (`step_key`, `size_key`, `fmt_rate`, `unit_of`,
`largest_common_size`)."""

import datetime as dt
import re
from collections import Counter, defaultdict
from typing import Optional

from runner.record import names
from runner.results import runs as recorded
from runner.results.records import BEST_RULE
from runner.results.records import best_runs as _best_runs
from runner.results.records import clock as _clock
from runner.results.records import commit as _commit
from runner.results.records import hygiene as _hygiene
from runner.results.records import is_gemm as _is_gemm
from runner.results.records import pct_cell as _pct_cell
from runner.results.records import rate as _rate
from runner.results.records import reference as _reference
from runner.results.records import size_label as _size_label
from runner.results.records import status
from runner.results.records import tiling as _tiling
from runner.results.runs import provenance

STATUSES = ("ok", "refused", "failed", "cached")


def step_key(kernel: str):
    family, _, step = kernel.rpartition("_")
    return (family, int(step) if step.isdigit() else 0)


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def fmt_rate(value) -> str:
    """Thousands separated; three significant digits below 100 (a CPU's few GFLOPS)."""
    return _fmt(value, ",.0f" if value is None or abs(value) >= 100 else ".3g")


def size_key(size: str):
    return tuple(int(v) for v in re.findall(r"\d+", size))


def unit_of(is_gemm: bool) -> str:
    return "GFLOPS" if is_gemm else "GB/s"


def best_per_cell(runs) -> dict:
    """(backend, device) -> {(kernel, size label): its best run} (records.best_runs: the
    fastest measured run, ok or cached, by its rate; never merely the newest)."""
    table = defaultdict(dict)
    for (kernel, size, backend, device), run in _best_runs(runs).items():
        table[(backend, device)][(kernel, size)] = run
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
        for size in sorted({size for _, size in cells}, key=size_key):
            columns.append((backend, device, size))
    kernels = sorted({k for cells in table.values() for k, _ in cells}, key=step_key)
    if not columns:
        return []
    several_devices = len({d for _, d, _ in columns}) > 1
    square = all(len(set(size_key(s))) == 1 for _, _, s in columns)

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
            row.append(f"{fmt_rate(_rate(run))} ({_pct_cell(run, 0)})"
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
        size = largest_common_size(cells)
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
        for (kernel, at), run in sorted(cells.items(), key=lambda c: step_key(c[0][0])):
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
            lines.append(f"| {kernel} | {precision} | {fmt_rate(rate)} | "
                         + " | ".join(shares) + " |")
        lines.append("")
    return lines


def energy_lines(table: dict) -> list[str]:
    """The runs measured with `timing.energy_s`: the kernel's and the libraries' sustained rate,
    power and work per joule over launches back to back, in the same job, beside the rate."""
    rows = []
    for (backend, device), cells in sorted(table.items()):
        for (kernel, size), run in sorted(cells.items(),
                                          key=lambda c: (step_key(c[0][0]), size_key(c[0][1]))):
            m = run.data.metrics
            if m.get(names.ENERGY_GFLOPS_PER_WATT) is None:
                continue
            rows.append(
                f"| {kernel} | {size} | {backend} | {fmt_rate(_rate(run))} | "
                f"{fmt_rate(m.get('energy/gflops'))} | {_fmt(m.get('energy/power_w'), '.0f')} | "
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
    """What was not clean while timed, with why (a cached run: its source's); `clean` where it
    was watched and clean, else `—`."""
    tags = run.data.tags
    watched = names.GPU_HYGIENE in tags or names.HOST_HYGIENE in tags
    return _hygiene(run, reasons=True) or ("clean" if watched else "—")


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
             "earlier run, its caveats with them.", "",
             f"Each row and cell: {BEST_RULE}, with the tiling that made it.", ""]
    lines += sweeps or []
    lines += summary_table(table)
    for caption, name in images or []:
        lines += [f"![{caption}]({name})", ""]
    lines += ceiling_lines(table, ceilings or {})
    lines += energy_lines(table)
    for (backend, device), cells in sorted(table.items()):
        lines += [f"## {backend} on {device}", "",
                  *provenance(list(cells.values()), uri, commands_label="command(s)"), ""]
        units = {unit_of(_is_gemm(r)) for r in cells.values()}
        rate = units.pop() if len(units) == 1 else "rate"
        lines += [f"| step | size | tiling | {rate} | reference | reference {rate} | "
                  "% of reference | time ms (median) | registers | spill bytes | shared bytes | "
                  "error | SM clock | GPU/host | commit |",
                  "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | "
                  "--- | ---: | --- | --- |"]
        for (kernel, size), run in sorted(cells.items(),
                                          key=lambda c: (step_key(c[0][0]), size_key(c[0][1]))):
            m = run.data.metrics
            error = "exact" if not _is_gemm(run) else _fmt(m.get(names.CHECK_REL_ERROR), ".1e")
            step = kernel
            if status(run) == "cached":
                asked = ", not clean, reused as asked" if run.data.tags.get(
                    names.REUSED_UNCLEAN) else ""
                step += f" (cached from `{run.data.tags.get(names.REUSED_FROM, '?')[:8]}`{asked})"
            reference = _reference(run)
            lines.append(
                f"| {step} | {size} | {_tiling(run) or '—'} | {fmt_rate(_rate(run))} | "
                f"{reference.name if reference else '—'} | "
                f"{fmt_rate(reference.rate if reference else None)} | "
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


def largest_common_size(cells: dict) -> Optional[str]:
    """The largest size every step has; else the size most steps have (the largest of those)."""
    by_size = defaultdict(set)
    for (kernel, size), run in cells.items():
        if _rate(run) is not None:
            by_size[size].add(kernel)
    if not by_size:
        return None
    return max(by_size, key=lambda s: (len(by_size[s]), size_key(s)))
