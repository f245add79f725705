"""`python -m runner.compare A B` (and `gemmlab compare A B`): is B faster than A, pair by pair?

A and B each select runs in one store (`--uri`, every experiment unless `--experiment`):

- a run id, or a sweep's parent run id (its children), whole or its first characters (4 or more);
- an experiment's name (its runs), or a run name (a sweep's first, as the report's --sweep);
- `tag:<name>=<value>`: the runs with that tag, e.g. `tag:gemmlab.git_commit=3f2a9c1` (the value
  matched whole, else as a prefix: a short commit finds `3f2a9c1…-dirty` too).

Only measured runs count (status ok or cached; a cached run's samples are those of the run it
reused). The runs of A and B are paired by `--pair-by` (default: kernel, params, size, backend,
device: the same step with the same tiling at the same size on the same device); `--pair-by
size` pairs two different kernels by size. Where a side has several runs for one pair (an
experiment holding the same sweep twice), its newest is compared; several runs that differ in
what was left out of the pairing (two kernels under `--pair-by size`) are an error.

Each pair gets the ratio of medians with its 95% interval, Mann-Whitney's p and a verdict:
runner/results/verdict.py says how, and docs/methodology.md#is-b-faster-than-a why.

Two runs of the same code drift apart by more than the samples inside one run say, so the min
effect δ is not only `--min-effect`: for each device it is the largest of that, the device
type's run-to-run floor (GPU 3%; CPU 200%, i.e. 3x) and the vendor baseline's drift between A
and B (the same library on the same problem, measured in each run: an A/A measurement taken at
the moments A and B ran). The table's caption says which set it. A side measured beside other
work (host.hygiene not clean, gpu.hygiene shared or throttled) is UNCLEAR unless the difference
is beyond 3x. A SAME needs δ within ±10%: at a wider one (the CPU's floor) the pair is UNCLEAR
with the reason in its note. A pair whose two sides are one measurement (B cached from A) is
REUSED, with no ratio. Measured on a 2-vCPU Xeon with PoCL, 10 pairs of A/A sweeps (matmul_1..3
at 128 and 192) on a clean host: 28 FASTER or SLOWER of 60 at the old fixed 2%, none now; with
the host shared by a test suite, 19 of 36 then, none now; matmul_1 against matmul_3 at 64
(5x apart) FASTER in 20 of 20 sweeps (docs/methodology.md#is-b-faster-than-a).

`--fail-on-slower 3%` exits 1 when a pair is SLOWER by more than 3% (a CI gate); `--out F.md`
writes the table as Markdown; `--log` records it as a run of its own, in the experiment
`gemmlab-compare` of the same store (never among the data a report reads, nor inside a
finished sweep), with the table as its artifact `compare.md`.
"""

import argparse
import math
import os
import re
import shlex
import statistics
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from runner.record import names
from runner.results import records
from runner.results import runs as recorded
from runner.results.verdict import (
    FASTER,
    REUSED,
    SAME,
    SAME_MAX_EFFECT,
    SLOWER,
    UNCLEAR,
    VERDICTS,
    MinEffect,
    Thresholds,
    Verdict,
    judge,
    measurement_of,
    min_effect_for,
    qualified,
    reused,
    unclean_note,
    with_hygiene,
)

PAIR_FIELDS = ("kernel", "params", "size", "backend", "device")
# Tags that say how a vendor baseline went rather than what it was (the latter's older name):
# two baselines that differ only in these are still the same code, the same setting.
_VENDOR_OUTCOME_TAGS = (names.VENDOR_UNUSABLE, "vendor.noisy")
_STATUS_COLOURS = {FASTER: "green", SLOWER: "red", SAME: "", UNCLEAR: "yellow", REUSED: "yellow"}


@dataclass
class Selection:
    selector: str  # as given
    label: str  # what it matched: "sweep 'name' (id)", "experiment 'x'", …
    runs: list  # the measured runs, newest first
    unmeasured: int = 0  # runs it matched that measured nothing (failed, refused, …)


@dataclass
class Pair:
    key: tuple
    a: object  # the MLflow runs
    b: object
    verdict: Verdict
    min_effect: Optional[MinEffect] = None  # the δ it was judged with, and where it came from


@dataclass
class Comparison:
    a: Selection
    b: Selection
    pair_by: tuple
    thresholds: Thresholds
    pairs: list[Pair]
    only_a: list = field(default_factory=list)  # pair keys with a run of A and none of B
    only_b: list = field(default_factory=list)
    # The δ of each group of pairs on one device (A's, B's): see min_effects_of.
    min_effects: dict = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {v: sum(p.verdict.verdict == v for p in self.pairs) for v in VERDICTS}

    def geomean_speedup(self) -> Optional[float]:
        """Over the pairs whose speed ratio is known; None where none is."""
        known = [p.verdict.speedup for p in self.pairs
                 if math.isfinite(p.verdict.speedup) and p.verdict.speedup > 0]
        return math.exp(sum(math.log(s) for s in known) / len(known)) if known else None

    def slower_than(self, limit: float) -> list[Pair]:
        """The SLOWER pairs whose B takes more than (1 + limit) times A's time."""
        return [p for p in self.pairs
                if p.verdict.verdict == SLOWER and p.verdict.change > limit]


# ---------------------------------------------------------------- selecting runs

def _measured(runs: list) -> tuple[list, int]:
    runs = [r for r in runs if r.data.tags.get(names.SWEEP) != "true"]
    kept = [r for r in runs if records.status(r) in recorded.MEASURED]
    return kept, len(runs) - len(kept)


def _of_run(mlflow_client, run, ids: list[str]) -> tuple[str, list]:
    """A run's own measurement, or a sweep parent's children."""
    name = run.info.run_name or ""
    if run.data.tags.get(names.SWEEP) == "true":
        children = recorded.search(mlflow_client, ids or [run.info.experiment_id],
                                   f"tags.`{names.PARENT_RUN_ID}` = '{run.info.run_id}'")
        named = name if name.startswith("sweep") else f"sweep {name!r}"
        return f"{named} ({run.info.run_id[:8]})", children
    return f"run {run.info.run_name!r} ({run.info.run_id[:8]})", [run]


def resolve(mlflow_client, selector: str, ids: list[str]) -> Selection:
    """The runs a selector names (see the module's doc), in the experiments `ids`."""
    def selection(label: str, runs: list) -> Selection:
        measured, unmeasured = _measured(runs)
        if not measured:
            raise recorded.NoRuns(f"{selector!r} matches {label} with no measured runs"
                                  + (f" ({unmeasured} failed, refused or unfinished)"
                                     if unmeasured else ""))
        return Selection(selector, label, measured, unmeasured)

    if selector.startswith("tag:"):
        tag, equals, value = selector[4:].partition("=")
        if not tag or not equals or not value:
            raise recorded.NoRuns(f"{selector!r}: a tag selector is tag:<name>=<value>, e.g. "
                                  f"tag:{names.GIT_COMMIT}=3f2a9c1")
        quoted = value.replace("'", "\\'")
        runs = recorded.search(mlflow_client, ids, f"tags.`{tag}` = '{quoted}'") if ids else []
        if not runs and ids:
            runs = recorded.search(mlflow_client, ids, f"tags.`{tag}` LIKE '{quoted}%'")
        if not runs:
            raise recorded.NoRuns(f"no run has the tag {tag}={value} (nor one starting so)")
        return selection(f"tag {tag}={value}", runs)
    try:
        run = mlflow_client.get_run(selector)
        if run.info.experiment_id in ids:
            return selection(*_of_run(mlflow_client, run, ids))
    except Exception:  # not a whole run id
        pass
    if re.fullmatch(r"[0-9a-f]{4,31}", selector):
        every = recorded.search(mlflow_client, ids) if ids else []
        found = [r for r in every if r.info.run_id.startswith(selector)]
        if len(found) > 1:
            raise recorded.NoRuns(f"{len(found)} runs have ids starting {selector!r}: give more "
                                  "of it")
        if found:
            return selection(*_of_run(mlflow_client, found[0], ids))
    experiment = mlflow_client.get_experiment_by_name(selector)
    if experiment is not None and experiment.experiment_id in ids:
        return selection(f"experiment {selector!r}",
                         recorded.search(mlflow_client, [experiment.experiment_id]))
    quoted = selector.replace("'", "\\'")
    named = recorded.search(mlflow_client, ids, f"attributes.run_name = '{quoted}'") if ids else []
    if named:
        parents = [r for r in named if r.data.tags.get(names.SWEEP) == "true"]
        return selection(*_of_run(mlflow_client, (parents or named)[0], ids))
    raise recorded.NoRuns(f"{selector!r} matches no run, sweep, experiment or run name (nor a "
                          f"tag:<name>=<value>)")


# ---------------------------------------------------------------- pairing

def field_value(run, name: str) -> str:
    """One pairing field of a run, as text."""
    params = run.data.params
    if name == "kernel":
        return params.get(names.KERNEL_NAME, "?")
    if name == "params":
        tiling = records.tiling(run)
        cap = params.get(names.KERNEL_MAX_REGISTERS)
        precision = params.get(names.KERNEL_PRECISION, "fp32")
        return " ".join(filter(None, [tiling, f"regs<={cap}" if cap else "",
                                      "" if precision == "fp32" else precision]))
    if name == "size":
        return records.size_label(run)
    if name == "backend":
        return params.get(names.BACKEND_NAME, "?")
    if name == "device":
        return run.data.tags.get(names.DEVICE_NAME, "?")
    raise ValueError(name)


def _identity(run) -> tuple:
    return tuple(field_value(run, name) for name in PAIR_FIELDS)


def _by_key(selection: Selection, pair_by: tuple, side: str) -> dict[tuple, object]:
    """Each pair key's newest run (runs come newest first); an error where two runs under one
    key are not the same measurement (they differ in a field left out of the pairing)."""
    found: dict[tuple, object] = {}
    for run in selection.runs:
        key = tuple(field_value(run, name) for name in pair_by)
        if key not in found:
            found[key] = run
        elif _identity(found[key]) != _identity(run):
            apart = [name for name, x, y in zip(PAIR_FIELDS, _identity(found[key]),
                                                _identity(run)) if x != y]
            raise recorded.NoRuns(
                f"{side} ({selection.label}) has runs that differ in {', '.join(apart)} for "
                f"{_describe(pair_by, key)}: pair by more (--pair-by "
                f"{','.join(list(pair_by) + [n for n in apart if n not in pair_by])}) or "
                f"select fewer runs")
    return found


def _describe(pair_by: tuple, key: tuple) -> str:
    return " ".join(f"{name}={value}" for name, value in zip(pair_by, key) if value)


def _natural(text: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", text)]


def pair_runs(a: Selection, b: Selection, pair_by: tuple) -> tuple[list, list, list]:
    """(key, run of A, run of B) for every key both have, then the keys only A, only B has."""
    runs_a, runs_b = _by_key(a, pair_by, "A"), _by_key(b, pair_by, "B")
    order = lambda key: [_natural(value) for value in key]  # noqa: E731
    both = sorted(set(runs_a) & set(runs_b), key=order)
    return ([(key, runs_a[key], runs_b[key]) for key in both],
            sorted(set(runs_a) - set(runs_b), key=order),
            sorted(set(runs_b) - set(runs_a), key=order))


# ---------------------------------------------------------------- samples and verdicts

def samples_of(mlflow_client, run, folder: str) -> Optional[list[float]]:
    """The run's timed samples (a cached run's: those of the run it reused), or None."""
    source = measurement_of(run.info.run_id, run.data.tags)
    try:
        path = mlflow_client.download_artifacts(source, names.SAMPLES_ARTIFACT,
                                                str(Path(folder, source)))
        return [float(line) for line in Path(path).read_text().split()]
    except Exception:  # no artifact (a run recorded elsewhere without its files)
        return None


def _median(run, samples: Optional[list[float]]) -> float:
    return statistics.median(samples) if samples else \
        run.data.metrics.get(names.TIME_MS_MEDIAN, math.nan)


def _cached_note(run_a, run_b) -> str:
    """"B cached from run 3f2a9c1e" for a side whose samples are another run's."""
    return "; ".join(f"{side} cached from run {run.data.tags[names.REUSED_FROM][:8]}"
                     for side, run in (("A", run_a), ("B", run_b))
                     if run.data.tags.get(names.REUSED_FROM))


def verdict_of(mlflow_client, run_a, run_b, thresholds: Thresholds, folder: str) -> Verdict:
    """The pair's verdict at `thresholds` (their δ already the pair's own), and what a side
    measured beside other work leaves of it (verdict.with_hygiene); REUSED where both sides
    are one measurement (verdict.reused)."""
    a, b = samples_of(mlflow_client, run_a, folder), samples_of(mlflow_client, run_b, folder)
    one = reused(run_a.info.run_id, run_a.data.tags, run_b.info.run_id, run_b.data.tags)
    if one:  # its median on both sides, and no ratio, interval or test of it with itself
        return Verdict(REUSED, math.nan, math.nan, math.nan, math.nan, _median(run_a, a),
                       _median(run_b, b), len(a or ()), len(b or ()), note=one,
                       min_effect=thresholds.min_effect)
    clock_a = run_a.data.metrics.get(names.GPU_SM_CLOCK_MHZ)
    clock_b = run_b.data.metrics.get(names.GPU_SM_CLOCK_MHZ)
    if a and b:
        verdict = judge(a, b, thresholds, clock_a, clock_b)
    else:
        median_a = run_a.data.metrics.get(names.TIME_MS_MEDIAN, math.nan)
        median_b = run_b.data.metrics.get(names.TIME_MS_MEDIAN, math.nan)
        missing = " and ".join(side for side, s in (("A", a), ("B", b)) if not s)
        verdict = Verdict(UNCLEAR, median_a / median_b, math.nan, math.nan, math.nan, median_a,
                          median_b, len(a or ()), len(b or ()),
                          note=f"no recorded samples ({names.SAMPLES_ARTIFACT}) for {missing}",
                          min_effect=thresholds.min_effect)
    verdict = with_hygiene(verdict, unclean_note(run_a.data.tags, run_b.data.tags))
    cached = _cached_note(run_a, run_b)
    return replace(verdict, note="; ".join(filter(None, [verdict.note, cached])))


def _device_group(run_a, run_b) -> tuple[str, str]:
    return field_value(run_a, "device"), field_value(run_b, "device")


def _vendor_setting(run) -> dict:
    """What the run's vendor baseline was: the library, where it ran, its threads."""
    return {name: value for name, value in run.data.tags.items()
            if name.startswith("vendor.") and name not in _VENDOR_OUTCOME_TAGS}


def min_effects_of(paired: list, requested: float) -> dict[tuple, MinEffect]:
    """δ for each group of pairs on one device (A's, B's): the largest of the user's, the
    device type's run-to-run floor, and how far the vendor baselines of the group's pairs
    drifted between A and B (verdict.py's module doc says why). A baseline is measured once
    per problem and reused by the sweep's jobs, so its drift is labelled by the size."""
    groups: dict[tuple, list] = {}
    for _, run_a, run_b in paired:
        groups.setdefault(_device_group(run_a, run_b), []).append((run_a, run_b))
    found = {}
    for group, runs in groups.items():
        types = {run.data.tags.get(names.DEVICE_TYPE) for pair in runs for run in pair}
        medians = [(field_value(run_a, "size"),
                    run_a.data.metrics.get(names.VENDOR_TIME_MS_MEDIAN),
                    run_b.data.metrics.get(names.VENDOR_TIME_MS_MEDIAN))
                   for run_a, run_b in runs if _vendor_setting(run_a) == _vendor_setting(run_b)]
        found[group] = min_effect_for(requested, types, medians)
    return found


def compare(mlflow_client, a: Selection, b: Selection, pair_by: tuple = PAIR_FIELDS,
            thresholds: Thresholds = Thresholds()) -> Comparison:
    paired, only_a, only_b = pair_runs(a, b, pair_by)
    if not paired:
        def keys(side):
            return "; ".join(_describe(pair_by, k) for k in side[:3]) + \
                ("; …" if len(side) > 3 else "")
        raise recorded.NoRuns(
            f"no run of A ({a.label}) pairs with one of B ({b.label}) by "
            f"{','.join(pair_by)}: A has {keys(only_a)}, B has {keys(only_b)} (--pair-by "
            f"chooses what must match)")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one per file
    min_effects = min_effects_of(paired, thresholds.min_effect)
    pairs = []
    with tempfile.TemporaryDirectory() as folder:
        for key, run_a, run_b in paired:
            min_effect = min_effects[_device_group(run_a, run_b)]
            own = replace(thresholds, min_effect=min_effect.value)
            verdict = qualified(verdict_of(mlflow_client, run_a, run_b, own, folder), min_effect)
            pairs.append(Pair(key, run_a, run_b, verdict, min_effect))
    return Comparison(a, b, tuple(pair_by), thresholds, pairs, only_a, only_b, min_effects)


# ---------------------------------------------------------------- output

def _columns(comparison: Comparison) -> list[tuple[str, Callable]]:
    """What tells the pairs apart: kernel, tiling and size always, backend and device where
    they vary or were not paired on; a field not paired on shows `A → B` where they differ."""
    def shown(name):
        def value(pair):
            x, y = field_value(pair.a, name), field_value(pair.b, name)
            return x if x == y else f"{x} → {y}"
        return value
    columns = []
    for name in PAIR_FIELDS:
        values = {shown(name)(pair) for pair in comparison.pairs}
        if values == {""}:
            continue
        if name in ("kernel", "params", "size") or len(values) > 1 or \
                name not in comparison.pair_by:
            columns.append((name, shown(name)))
    return columns


def _devices(comparison: Comparison) -> str:
    return ", ".join(sorted({f"{field_value(run, 'backend')} on {field_value(run, 'device')}"
                             for pair in comparison.pairs for run in (pair.a, pair.b)}))


def _number(value: float, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


def _cells(pair: Pair) -> list[str]:
    v = pair.verdict
    known = lambda value: value == value  # noqa: E731 (not nan)
    return [_number(v.median_a_ms, ".4g"), _number(v.median_b_ms, ".4g"),
            f"{v.speedup:.3f}x" if known(v.speedup) else "—",
            f"{v.low:.3f}–{v.high:.3f}" if known(v.low) or known(v.high) else "—",
            _number(v.p_value, ".2g"), f"{v.count_a}/{v.count_b}", v.verdict, v.note]


HEADERS = ["A median ms", "B median ms", "B/A speed", "95% interval", "p (U test)",
           "samples A/B", "verdict", "note"]


def summary(comparison: Comparison) -> str:
    counts = comparison.counts()
    count, speed = len(comparison.pairs), comparison.geomean_speedup()
    line = (f"{count} pair{'' if count == 1 else 's'}: " +
            ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v != REUSED or counts[v]) +
            "; B/A speed " + (f"{speed:.3f}x (geometric mean)" if speed is not None else
                               "— (no pair compared)"))
    unpaired = []
    if comparison.only_a:
        unpaired.append(f"{len(comparison.only_a)} only in A")
    if comparison.only_b:
        unpaired.append(f"{len(comparison.only_b)} only in B")
    return line + (f"; unpaired: {', '.join(unpaired)}" if unpaired else "")


def settings_line(comparison: Comparison) -> str:
    t = comparison.thresholds
    return (f"paired by {','.join(comparison.pair_by)}; FASTER/SLOWER: Mann-Whitney U p < "
            f"{t.alpha:g} and the speed ratio beyond the min effect ±δ; SAME: its 95% interval "
            f"within ±δ (δ ≤ {SAME_MAX_EFFECT:.0%}); UNCLEAR: neither, δ too wide, or a side "
            f"measured beside other work; REUSED: B and A are one measurement (cached)")


def min_effect_lines(comparison: Comparison) -> list[str]:
    """δ and where it came from: one line, or one per device where the pairs span several."""
    several = len(comparison.min_effects) > 1
    lines = []
    for (device_a, device_b), min_effect in comparison.min_effects.items():
        where = (f" on {device_a}" if device_a == device_b else
                 f" on {device_a} → {device_b}") if several else ""
        lines.append(f"min effect δ{where} {min_effect.source()}")
    return lines


def markdown(comparison: Comparison, command: str = "", uri: str = "") -> str:
    columns = _columns(comparison)
    head = [name for name, _ in columns] + HEADERS
    lines = ["# B against A", "",
             f"- A: `{comparison.a.selector}`: {comparison.a.label}, "
             f"{len(comparison.a.runs)} measured runs",
             f"- B: `{comparison.b.selector}`: {comparison.b.label}, "
             f"{len(comparison.b.runs)} measured runs",
             f"- devices: {_devices(comparison)}",
             f"- {settings_line(comparison)}",
             *(f"- {line}" for line in min_effect_lines(comparison))]
    if uri:
        lines.append(f"- store: `{uri}`")
    if command:
        lines.append(f"- command: `{command}`")
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pair in comparison.pairs:
        cells = [value(pair) for _, value in columns] + _cells(pair)
        cells[len(columns) + 6] = f"**{cells[len(columns) + 6]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", f"**{summary(comparison)}**", ""]
    return "\n".join(lines)


def print_table(comparison: Comparison, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:  # a log or a pipe: the whole table, not 80 columns of it
            console = Console(highlight=False, width=200)
    columns = _columns(comparison)
    table = Table(title=f"B ({comparison.b.label}) against A ({comparison.a.label})",
                  caption="\n".join([settings_line(comparison),
                                      *min_effect_lines(comparison)]))
    for name, _ in columns:
        table.add_column(name)
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("verdict", "note") else "right")
    for pair in comparison.pairs:
        cells = [value(pair) for _, value in columns] + _cells(pair)
        colour = _STATUS_COLOURS[pair.verdict.verdict]
        index = len(columns) + 6
        cells[index] = f"[bold {colour}]{cells[index]}[/]" if colour else cells[index]
        table.add_row(*cells)
    console.print(table)
    console.print(summary(comparison))


def log_to_mlflow(uri: str, comparison: Comparison, page: str) -> str:
    """Record the comparison as a run of its own in the experiment `gemmlab-compare`; its id."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(names.COMPARE_EXPERIMENT)
    counts = comparison.counts()
    name = (f"compare {comparison.a.selector} → {comparison.b.selector}: "
            + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v]))
    with mlflow.start_run(run_name=name[:250], tags={names.COMPARE: "true"}) as run:
        t = comparison.thresholds
        mlflow.log_params({names.COMPARE_A: comparison.a.selector[:500],
                           names.COMPARE_B: comparison.b.selector[:500],
                           names.COMPARE_PAIR_BY: ",".join(comparison.pair_by),
                           names.COMPARE_MIN_EFFECT: str(t.min_effect),
                           names.COMPARE_ALPHA: str(t.alpha)})
        speed = comparison.geomean_speedup()  # None where no pair was compared (all REUSED)
        mlflow.log_metrics({names.COMPARE_PAIRS: len(comparison.pairs),
                            **({} if speed is None else {names.COMPARE_GEOMEAN_SPEEDUP: speed}),
                            **{names.COMPARE_COUNT_PREFIX + v.lower(): counts[v]
                               for v in VERDICTS}})
        mlflow.log_text(page, names.COMPARE_ARTIFACT)
        return run.info.run_id


# ---------------------------------------------------------------- the command

def fraction(text: str) -> float:
    """`3%` or `0.03` -> 0.03."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage (3%) or a fraction (0.03)")
    if not text.endswith("%") and value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: write a percentage with its sign (3%) or a "
                                         "fraction below 1 (0.03)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0% and 100%")
    return value


def pair_fields(text: str) -> tuple:
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    wrong = [f for f in fields if f not in PAIR_FIELDS]
    if wrong or not fields:
        raise argparse.ArgumentTypeError(f"--pair-by takes a comma list of {', '.join(PAIR_FIELDS)}"
                                         + (f" (not {', '.join(wrong)})" if wrong else ""))
    return fields


def main(argv=None, prog: str = "python -m runner.compare") -> int:
    """The command (`prog` names it in usage lines: `gemmlab compare` from the console script);
    the exit status: 1 where --fail-on-slower finds a pair slower, else 0."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.splitlines()[0],
        epilog="Verdicts: FASTER/SLOWER where Mann-Whitney's U finds a difference (p < --alpha) "
               "beyond the min effect δ; SAME where the 95% interval of the speed ratio is "
               "inside ±δ; UNCLEAR otherwise, where the SM clocks explain it, or where a side "
               "was measured beside other work (host.hygiene or gpu.hygiene not clean) and the "
               "difference is within 3x; SAME needs δ within 10%%; REUSED where B's run "
               "reused A's measurement (cached). δ is "
               "the largest of --min-effect, the device type's run-to-run floor, and how far "
               "the vendor library's baseline drifted between A and B.")
    parser.add_argument("a", metavar="A", help="the baseline: a run or sweep id (or its first "
                                               "characters), an experiment, a run name, or "
                                               "tag:<name>=<value>")
    parser.add_argument("b", metavar="B", help="the candidate, selected the same way")
    parser.add_argument("--uri", default=recorded.DEFAULT_URI, help="MLflow tracking URI")
    parser.add_argument("--experiment", help="look only in this experiment (default: all)")
    parser.add_argument("--pair-by", type=pair_fields, default=PAIR_FIELDS,
                        help=f"fields that must match for two runs to pair (default: "
                             f"{','.join(PAIR_FIELDS)}; e.g. size to compare two kernels)")
    parser.add_argument("--min-effect", type=fraction, default=Thresholds.min_effect,
                        help="the smallest change that counts (default 2%%); raised to the "
                             "device's run-to-run floor and the vendor baseline's drift "
                             "between A and B where those are larger")
    parser.add_argument("--alpha", type=float, default=Thresholds.alpha,
                        help="the U test's significance level (default 0.05)")
    parser.add_argument("--fail-on-slower", type=fraction, metavar="PCT",
                        help="exit 1 when a pair is SLOWER by more than this (e.g. 3%%)")
    parser.add_argument("--out", help="also write the table as Markdown to this file")
    parser.add_argument("--log", action="store_true",
                        help=f"also record the table in MLflow (experiment "
                             f"{names.COMPARE_EXPERIMENT!r})")
    args = parser.parse_args(argv)
    thresholds = Thresholds(min_effect=args.min_effect, alpha=args.alpha)
    mlflow_client = recorded.client(args.uri)
    ids = recorded.experiment_ids(mlflow_client, args.experiment)
    a, b = resolve(mlflow_client, args.a, ids), resolve(mlflow_client, args.b, ids)
    comparison = compare(mlflow_client, a, b, args.pair_by, thresholds)
    print_table(comparison)
    command = f"{prog} " + shlex.join(argv if argv is not None else sys.argv[1:])
    page = markdown(comparison, command, args.uri)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(page)
        print(f"wrote {args.out}")
    if args.log:
        print(f"recorded: MLflow run {log_to_mlflow(args.uri, comparison, page)} (experiment "
              f"{names.COMPARE_EXPERIMENT!r}) in {args.uri}")
    if args.fail_on_slower is not None:
        slower = comparison.slower_than(args.fail_on_slower)
        if slower:
            listed = "; ".join(f"{_describe(comparison.pair_by, p.key)} "
                               f"{p.verdict.change:+.1%}" for p in slower[:5])
            print(f"gemmlab: error: {len(slower)} pair(s) SLOWER by more than "
                  f"{args.fail_on_slower:.1%}: {listed}" + ("; …" if len(slower) > 5 else ""),
                  file=sys.stderr)
            return 1
    return 0
