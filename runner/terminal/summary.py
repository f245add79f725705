"""The terminal's short account of a run: one line of results and where it was recorded."""

from rich.console import Console
from rich.markup import escape

from runner.record import names
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
    shared: …" where the host's CPUs were not, for a CPU device), else ""."""
    host = getattr(outcome, "host", None)
    if host is not None and host.hygiene == "shared":
        return f" · [bold yellow]host shared[/]: {escape(host.why())}"
    if outcome.gpu is None or outcome.gpu.hygiene == "clean":
        return ""
    return f" · [bold yellow]GPU {outcome.gpu.hygiene}[/]: {escape(outcome.gpu.why())}"


def print_summary(outcome: RunOutcome, backend_name: str, where: str) -> None:
    plan, metrics = outcome.plan, outcome.metrics
    size = plan.size.label(plan.operation)
    if plan.flops:
        rate = f"{_number(metrics.get(names.GFLOPS), ',.1f')} GFLOPS"
    else:
        rate = f"{_number(metrics.get(names.GBPS), ',.1f')} GB/s"
    vendor = ""
    if outcome.vendor is not None and metrics.get(names.PCT_OF_VENDOR) is None:
        vendor = f" · no % of {outcome.vendor.name} (its baseline stayed noisy)"
    elif outcome.vendor is not None:
        vendor = f" · {metrics[names.PCT_OF_VENDOR]:.1f}% of {outcome.vendor.name}"
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


def print_cached(plan, backend_name: str, metrics: dict, earlier_run_id: str, where: str) -> None:
    """A sweep point measured before: its earlier result, and how to measure it again."""
    size = plan.size.label(plan.operation)
    if metrics.get(names.GFLOPS) is not None:
        rate = f"{metrics[names.GFLOPS]:,.1f} GFLOPS"
    else:
        rate = f"{_number(metrics.get(names.GBPS), ',.1f')} GB/s"
    console.print(f"[bold]{plan.name}[/] · {backend_name} · {size} · [bold]{rate}[/] · "
                  f"cached: measured in run {earlier_run_id[:8]}… with the same source, "
                  f"parameters, size, device and driver (+rerun=true measures again)")
    console.print(f"  recorded: {where}")


def headline(metrics: dict) -> str:
    """The run's result in a few words, appended to its MLflow run name: the runs table and the
    compare view then show the rate and % of the vendor library first, without picking columns."""
    if metrics.get(names.GFLOPS) is not None:
        rate = f"{metrics[names.GFLOPS]:,.1f} GFLOPS"
    elif metrics.get(names.GBPS) is not None:
        rate = f"{metrics[names.GBPS]:,.1f} GB/s"
    else:
        return ""
    pct = metrics.get(names.PCT_OF_VENDOR)
    return rate + ("" if pct is None else f" ({pct:.0f}% of vendor)")
