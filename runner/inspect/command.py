"""`python -m runner.inspect <overrides>`: what a kernel compiles to, without running it.

    python -m runner.inspect backend=cuda kernel=matmul_9                # no GPU needed
    python -m runner.inspect backend=cuda kernel=matmul_9 kernel.params.TN=4 kernel.params.WN=32
    python -m runner.inspect backend=opencl kernel=matmul_2              # the build log
    python -m runner.inspect --ladder sgemm backend=cuda                 # one table, every step

The overrides are exactly `python -m runner`'s (the same config, composed by Hydra's compose API).
Files go to `<out>/<kernel>-<backend>/` (`--out`, default `inspect/`): summary.md, the PTX and
SASS (CUDA), ptxas.txt, or build_log.txt (OpenCL); a ladder adds `<out>/<ladder>-<backend>.md`.
Every run of `python -m runner` records the same files as artifacts under `inspect/`.
"""

import argparse
import sys
from pathlib import Path
from typing import Optional

from hydra.errors import HydraException
from hydra_plugins.gemmlab_launcher import register as register_launchers
from omegaconf import OmegaConf
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from runner.config.paths import CONF_DIR, kernel_source_path, kernel_source_text
from runner.config.schema import register_configs
from runner.errors import RunError

console = Console(highlight=False, soft_wrap=True)


def compose(overrides: list[str]):
    """The config `python -m runner <overrides>` would run with, its kernel's size rules
    applied as a run applies them; and the rule applied, in words (None when none was)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from runner.config.size_rules import apply_size_rules, pinned_params

    register_configs()
    register_launchers()  # conf/config.yaml names hydra/launcher: gemmlab
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    return cfg, apply_size_rules(cfg, pinned_params(overrides))


def ladders() -> dict[str, list[str]]:
    """Each `conf/experiment/<name>_ladder.yaml`'s steps, by name (sgemm, transpose)."""
    found = {}
    for path in sorted((CONF_DIR / "experiment").glob("*_ladder.yaml")):
        swept = OmegaConf.load(path).hydra.sweeper.params.kernel
        found[path.stem.removesuffix("_ladder")] = [s.strip() for s in str(swept).split(",")]
    return found


def _backend(cfg):
    if cfg.backend.name == "cuda":  # compile-only when there is no GPU: NVRTC needs none
        from runner.backends.cuda import CUDABackend

        return CUDABackend(cfg.backend.device, cfg.backend.compile_only_cc, require_gpu=False)
    from runner.backends import make_backend

    return make_backend(cfg.backend)


def _check_target(plan, backend) -> None:
    """A tensor-core step is compiled only for a target that has the instructions."""
    from runner.errors import Refused
    from runner.run.limits import check_device_support

    needed = plan.requires_compute_capability
    if needed is None:
        return
    if backend.name == "cuda":  # the target: the GPU's, or compile_only_cc without one
        if backend.compute_capability < needed:
            raise Refused(f"{plan.name} needs sm_{needed} or later (mma.sync TF32); "
                          f"the target is sm_{backend.compute_capability}")
        if plan.requires_exact_architecture and backend.compute_capability != needed:
            raise Refused(f"{plan.name} needs sm_{needed}a exactly (wgmma); "
                          f"the target is sm_{backend.compute_capability}")
        return
    check_device_support(plan, backend.device_info())


def inspect_config(cfg):
    """Compile the config's kernel as a run would (same plan, defines and cache), check each
    launch's arguments against the compiled signature as a run does, and inspect it."""
    from runner.config.paths import source_file_name
    from runner.config.preflight import check_kernel_dirs
    from runner.config.spec import ProblemSize, plan_kernel
    from runner.inspect.program import inspect_program
    from runner.run.kernel_program import check_signatures, compile_once

    check_kernel_dirs(cfg.kernel_dirs)  # a folder that is not there: not the packaged kernel
    plan = plan_kernel(cfg.kernel, ProblemSize(cfg.m, cfg.n, cfg.k))
    backend = _backend(cfg)
    file_name = source_file_name(cfg.kernel, backend.name)
    _check_target(plan, backend)
    path = kernel_source_path(backend.name, file_name, cfg.kernel_dirs)
    source = kernel_source_text(path, plan.include_first.get(backend.name, ()))
    include_dirs = (str(path.parent),)
    program = compile_once(backend, source, file_name, plan.entries, plan.defines,
                           plan.max_registers, include_dirs)
    # every launch's arguments against the compiled signature, as a run checks them
    check_signatures(plan, program, file_name, backend.name)
    return inspect_program(backend, source, file_name, plan, program, include_dirs)


def write_files(inspection, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in inspection.files.items():
        (folder / name).write_text(text)
    return folder


def print_inspection(inspection, folder: Path) -> None:
    from runner.inspect.program import summary_rows

    table = Table(title=f"{inspection.kernel} · {inspection.backend} · {inspection.target}",
                  title_justify="left")
    table.add_column("")
    for report in inspection.entries:
        table.add_column(report.entry, justify="right")
    for label, values in summary_rows(inspection):
        table.add_row(label, *values)
    console.print(table)
    for note in inspection.notes:
        console.print(f"  {note}")
    console.print(f"  files: {folder}/ ({', '.join(inspection.files)})")


LADDER_COLUMNS = ["step", "registers", "spill st/ld (B)", "shared (B)", "barriers",
                  "instructions", "FFMA share", "loop FFMA share", "loop mma", "LDS (.128)",
                  "LDG (.128)", "LDGSTS (.128)", "BAR", "FFMA bank conflicts"]
SHORT_COLUMNS = ["step", "regs", "spills", "shared", "bars", "instr", "FFMA", "loop FFMA",
                 "loop mma", "LDS (.128)", "LDG (.128)", "LDGSTS (.128)", "BAR", "bank confl."]


def ladder_row(step: str, inspection=None, failure: Optional[str] = None,
               outcome: str = "failed") -> list[str]:
    """A step's row; a step that could not be inspected has `<outcome>: <why>` in its second
    cell (the page's row), `outcome` being `refused` (the spec or the target says no) or
    `failed`."""
    from runner.inspect.program import _n, _pct, with_wide

    if inspection is None:
        return [step, f"{outcome}: {failure}"] + [""] * (len(LADDER_COLUMNS) - 2)
    main = inspection.main
    mix, loop, used = main.mix, main.loop, main.resources
    return [step, _n(used.registers), f"{_n(used.spill_store_bytes)}/{_n(used.spill_load_bytes)}",
            _n(main.local_memory_bytes), _n(main.barriers),
            _n(mix.total) if mix else "—", _pct(mix.ffma_share) if mix else "—",
            _pct(loop.ffma_share) if loop else "—", _n(loop.tensor) if loop else "—",
            with_wide(mix, "LDS"),
            with_wide(mix, "LDG"), with_wide(mix, "LDGSTS"), _n(mix.barriers) if mix else "—",
            _n(mix.bank_conflicts) if mix else "—"]


def run_ladder(name: str, overrides: list[str], out: Path) -> int:
    from runner.inspect.program import BANK_RULE, markdown_table

    steps = ladders().get(name)
    if steps is None:
        raise RunError(f"--ladder {name}: no such ladder (known: {', '.join(ladders())})")
    if any(o.split("=")[0].lstrip("+~") == "kernel" for o in overrides):
        raise RunError("--ladder sets kernel= itself; leave it off the command line")
    from runner.errors import Refused

    rows, backend, failed, target = [], "", 0, ""
    not_inspected = []  # (step, "refused" or "failed", why)
    for step in steps:
        cfg, _ = compose([*overrides, f"kernel={step}"])
        backend = cfg.backend.name
        try:
            inspection = inspect_config(cfg)
        except RunError as error:  # Refused included: the row says why
            outcome = "refused" if isinstance(error, Refused) else "failed"
            rows.append(ladder_row(step, failure=str(error), outcome=outcome))
            not_inspected.append((step, outcome, str(error)))
            failed += outcome == "failed"
            continue
        target = inspection.target
        write_files(inspection, out / f"{step}-{backend}")
        rows.append(ladder_row(step, inspection))
    text = (f"# The {name} ladder · {backend} · {target}\n\n"
            f"Overrides: `{' '.join(overrides) or '(none)'}`; each step at its own defaults "
            f"otherwise; its files in `{step_folder_pattern(backend)}`. The step's own kernel "
            "(the last launch), with the size rules a run at the overrides' size would apply; "
            "instruction counts are static SASS counts, the loop is the main loop (the "
            "shortest of those with the most FFMAs and tensor-core products); `loop mma`: "
            "the loop's tensor-core products (HMMA, HGMMA); `LDS (.128)`: all LDS, and in "
            "brackets the 128-bit ones.\n\n" + markdown_table(LADDER_COLUMNS, rows)
            + f"\n{BANK_RULE}\n")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{backend}.md"
    path.write_text(text)
    print_ladder(f"the {name} ladder · {backend} · {target}", rows, not_inspected)
    console.print(f"  written: {path} (and each step's files in {out}/<step>-{backend}/)")
    return 1 if failed else 0


def print_ladder(title: str, rows: list[list[str]], not_inspected: list) -> None:
    """The ladder on the terminal: one row a step, a step not inspected as one word (`refused`,
    `failed`) with its reason listed under the table; no column narrower than its header."""
    why = {step: (outcome, reason) for step, outcome, reason in not_inspected}
    table = Table(title=escape(title), title_justify="left")
    for index, column in enumerate(SHORT_COLUMNS):
        widest = max([len(column), *(len(row[index]) for row in rows if row[0] not in why)])
        table.add_column(column, justify="left" if column == "step" else "right",
                         no_wrap=True, min_width=widest if index == 0 else len(column))
    for row in rows:
        if row[0] in why:
            table.add_row(row[0], why[row[0]][0], *([""] * (len(SHORT_COLUMNS) - 2)))
        else:
            table.add_row(*(escape(cell) for cell in row))
    Console(highlight=False, width=max(console.width, 160)).print(table)
    for step, (outcome, reason) in why.items():
        reason = reason.removeprefix(f"{step}: ").removeprefix(f"{step} ")
        console.print(f"  {step} {outcome}: {escape(reason)}")


def step_folder_pattern(backend: str) -> str:
    return f"<step>-{backend}/"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runner.inspect",
        description="PTX, SASS, registers, spills and the instruction mix of a kernel as "
                    "compiled with its parameters (CUDA needs no GPU); the build log on OpenCL.")
    parser.add_argument("overrides", nargs="*", help="the runner's overrides, e.g. "
                        "backend=cuda kernel=matmul_9 kernel.params.BK=8")
    parser.add_argument("--ladder", help=f"every step of a ladder in one table "
                        f"({', '.join(ladders())})")
    parser.add_argument("--out", default="inspect", type=Path,
                        help="folder for the files (default: inspect/)")
    args = parser.parse_args(argv)
    from runner.config.preflight import refuse_missing_searchpath

    refuse_missing_searchpath()  # a hydra.searchpath folder that is not there: one line
    try:
        if args.ladder:
            return run_ladder(args.ladder, args.overrides, args.out)
        cfg, size_rule = compose(args.overrides)
        inspection = inspect_config(cfg)
        folder = write_files(inspection, args.out / f"{cfg.kernel.name}-{cfg.backend.name}")
        print_inspection(inspection, folder)
        if size_rule:
            console.print(f"  size rule of {cfg.kernel.name} at {cfg.m}x{cfg.n}x{cfg.k}: "
                          f"{escape(size_rule)}")
        return 0
    except (RunError, HydraException) as error:  # a refused value, a typo in a key
        console.print(f"[bold red]gemmlab inspect: error:[/] {escape(str(error))}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
