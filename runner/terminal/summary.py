"""The terminal's short account of a run: one line of results and where it was recorded."""

from rich.console import Console
from rich.markup import escape

from runner.record import names
from runner.results.records import Reference, library_name, noise_text, rate_text
from runner.run.execute import RunOutcome

console = Console(stderr=False, highlight=False, soft_wrap=True)
# Tables in a log or a pipe, as wide as they need: rich clamps print(width=...) to the
# console's own width, which is 80 where stdout is not a terminal.
log_console = Console(stderr=False, highlight=False, soft_wrap=True, width=240)
error_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _number(value, fmt: str, missing: str = "—") -> str:
    return missing if value is None else format(value, fmt)


def gpu_note(outcome: RunOutcome) -> str:
    """" · GPU shared: …" where the GPU was not clean during the timed launches (" · host
    shared: …" where the host's CPUs were not, for a CPU device), and " · samples noisy: median
    ±12.5%" where the median is not known to within NOISE_LIMIT; else ""."""
    noisy = noise_text(outcome.stats.noise) if outcome.stats is not None else ""
    note = f" · [bold yellow]{noisy}[/]" if noisy else ""
    host = getattr(outcome, "host", None)
    if host is not None and host.hygiene == "shared":
        return f" · [bold yellow]host shared[/]: {escape(host.why())}" + note
    if outcome.gpu is None or outcome.gpu.hygiene == "clean":
        return note
    return f" · [bold yellow]GPU {outcome.gpu.hygiene}[/]: {escape(outcome.gpu.why())}" + note


def print_summary(outcome: RunOutcome, backend_name: str, where: str) -> None:
    plan, metrics = outcome.plan, outcome.metrics
    size = plan.size.label(plan.operation)
    if plan.flops:
        rate = f"{_number(metrics.get(names.GFLOPS), ',.1f')} GFLOPS"
    else:
        rate = f"{_number(metrics.get(names.GBPS), ',.1f')} GB/s"
    vendor = ""
    reference = outcome_reference(outcome)
    if reference is not None and reference.pct is None:
        library = _reference_library(outcome)  # the record's vendor.unusable says why in full
        vendor = f" · {reference.text()} " + (
            "(not measured on this backend)" if library is None else
            "(its baseline was disturbed by other work)" if "disturbed" in library.notes else
            "(its baseline stayed noisy)")
    elif reference is not None:
        vendor = f" · {reference.text()}"
    if metrics.get(names.PCT_OF_PEAK) is not None:
        vendor += f" · {metrics[names.PCT_OF_PEAK]:.1f}% of peak"
    error = "exact" if plan.operation.value != "sgemm" else f"err {outcome.check.rel_error:.1e}"
    registers = _number(outcome.main_resources.registers, "d")
    launches = ""
    if len(plan.launches) > 1:
        launches = f" (time includes {' + '.join(l.entry for l in plan.launches)})"
    console.print(
        f"[bold]{plan.name}[/] · {backend_name} · {outcome.device.name} · {size} · "
        f"{outcome.stats.median:.4f} ms{launches} · [bold]{rate}[/]{vendor} · {error} · "
        f"regs {registers}" + gpu_note(outcome)
    )
    console.print(f"  recorded: {where}")


def print_sanitized(outcome: RunOutcome, backend_name: str, tool: str, where: str) -> None:
    """A run under a correctness tool: verified, and what the tool found (nothing)."""
    plan = outcome.plan
    error = "exact" if plan.operation.value != "sgemm" else f"err {outcome.check.rel_error:.1e}"
    console.print(f"[bold]{plan.name}[/] · {backend_name} · {outcome.device.name} · "
                  f"{plan.size.label(plan.operation)} · verified, {error} · "
                  f"[bold]{tool}: no errors[/] (nothing timed under the tool)")
    console.print(f"  recorded: {where}")


def print_failure(reason: str, where: str | None, recorded_as: str = "FAILED") -> None:
    # escaped: a reason may hold brackets ("expected one of [auto, gpu]"), never markup
    error_console.print(f"[bold red]gemmlab: error:[/] {escape(reason)}")
    if where:
        error_console.print(f"  recorded as {recorded_as}: {where}")


def print_cached(plan, backend_name: str, metrics: dict, tags: dict, earlier,
                 where: str) -> None:
    """A sweep point measured before: its earlier result with that measurement's caveats (its
    host or GPU not clean, with why; its samples noisy), that it was reused though not clean
    where the command asked (reuse_unclean=true), and how to measure it again. `earlier` is
    runner/record/resume.py's Earlier, `tags` the tags copied from its run."""
    size = plan.size.label(plan.operation)
    if metrics.get(names.GFLOPS) is not None:
        rate = f"{metrics[names.GFLOPS]:,.1f} GFLOPS"
    else:
        rate = f"{_number(metrics.get(names.GBPS), ',.1f')} GB/s"
    asked = (" · [bold yellow]reused though not clean[/], as asked (reuse_unclean=true)"
             if earlier.unclean else "")
    console.print(f"[bold]{plan.name}[/] · {backend_name} · {size} · [bold]{rate}[/] · "
                  f"cached: measured in run {earlier.run.info.run_id[:8]}… with the same source, "
                  f"parameters, size, device and driver (+rerun=true measures again)"
                  + caveats_note(metrics, tags) + asked)
    console.print(f"  recorded: {where}")


def print_measured_again(why: str) -> None:
    """Under a measured job's line: the run with its key that was not reused, and why."""
    if why:
        console.print(f"  [bold yellow]not reused[/]: {escape(why)}")


def caveats_note(metrics: dict, tags: dict) -> str:
    """gpu_note's words from a run's records: " · host shared: …", " · GPU throttled: …",
    " · samples noisy: median ±12.5%" where that measurement was not clean; else ""."""
    note = ""
    host, gpu = tags.get(names.HOST_HYGIENE), tags.get(names.GPU_HYGIENE)
    if host and host != "clean":
        why = tags.get(names.HOST_HYGIENE_REASONS, "")
        note += f" · [bold yellow]host {escape(host)}[/]" + (f": {escape(why)}" if why else "")
    if gpu and gpu != "clean":
        why = (tags.get(names.GPU_HYGIENE_REASONS) or "").strip("— ")
        note += f" · [bold yellow]GPU {escape(gpu)}[/]" + (f": {escape(why)}" if why else "")
    noisy = noise_text(metrics.get(names.TIME_NOISE))
    return note + (f" · [bold yellow]{noisy}[/]" if noisy else "")


def unclean_words(tags: dict) -> str:
    """` · GPU throttled · host shared` for a run's name where its GPU or host was not clean."""
    gpu, host = tags.get(names.GPU_HYGIENE), tags.get(names.HOST_HYGIENE)
    return ((f" · GPU {gpu}" if gpu and gpu != "clean" else "")
            + (f" · host {host}" if host and host != "clean" else ""))


def _reference_library(outcome: RunOutcome):
    """The baseline of the step's own precision: cuBLAS in TF32 mode for a TF32 step (None
    where the backend measured none), else the one that ran."""
    tf32 = outcome.plan.flops and outcome.plan.precision == "tf32"
    return outcome.vendor.tf32 if tf32 else outcome.vendor


def outcome_reference(outcome: RunOutcome):
    """The headline reference of a run just measured: the library of the step's own precision
    (cuBLAS TF32 for a TF32 step, else the baseline that ran) and the % recorded against it;
    None where no baseline ran."""
    if outcome.vendor is None:
        return None
    library = _reference_library(outcome)
    name = "cuBLAS TF32" if library is None else library_name(library.name)
    return Reference(name, outcome.metrics.get(names.PCT_OF_REFERENCE), None)


def headline(metrics: dict, reference: str = "") -> str:
    """The run's result in a few words: `397,645 GFLOPS · 98% cuBLAS TF32` (the % against the
    library named `reference`). The MLflow run name reads its words from the records
    themselves (runner/results/records.py, headline_of); this is where only metrics are held."""
    if metrics.get(names.GFLOPS) is not None:
        rate = rate_text(metrics[names.GFLOPS], "GFLOPS")
    elif metrics.get(names.GBPS) is not None:
        rate = rate_text(metrics[names.GBPS], "GB/s")
    else:
        return ""
    pct = metrics.get(names.PCT_OF_REFERENCE)
    return rate + ("" if pct is None else f" · {pct:.0f}% {reference or 'of reference'}")
