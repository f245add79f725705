"""What a compiled kernel is made of: PTX, SASS, ptxas' report, the instruction mix; as files.

CUDA needs no GPU: NVRTC's PTX and cubin, then NVIDIA's `nvdisasm` (or `cuobjdump -sass`) from
their pip packages (`pip install -e ".[cuda]"`). OpenCL: the build log; on NVIDIA's driver also
the PTX of the program binary and ptxas' report (`-cl-nv-verbose`); a CPU driver tells only what
the kernel's work-group queries give, and that is said in the summary.

`inspect_program` is what both `python -m runner.inspect` and every run (`inspect/` artifacts,
runner/run/execute.py) call; it never raises for a missing tool, it says what was missing.
"""

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from runner.backends.base import KernelResources
from runner.backends.ptxas import parse_ptxas_report
from runner.config.spec import entry_label
from runner.inspect.sass import BANK_RULE, InstructionMix, main_loop, parse_sass

# The disassemblers, in the order tried, with the pip package that carries each one.
DISASSEMBLERS = (("nvdisasm", "nvidia-cuda-nvdisasm", ["-c"]),
                 ("cuobjdump", "nvidia-cuda-cuobjdump", ["-sass"]))

_FUNCTION = re.compile(r"(?:Compiling entry function|Function properties for) '?(\w+)'?")
_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass
class EntryReport:
    entry: str
    resources: KernelResources
    barriers: Optional[int] = None  # named barriers, from ptxas' report
    mix: Optional[InstructionMix] = None  # the whole function (SASS)
    loop: Optional[InstructionMix] = None  # its main loop (SASS)
    dynamic_local_bytes: int = 0  # asked for by the launch: no compiler reports it

    @property
    def local_memory_bytes(self) -> Optional[int]:
        """What one work-group holds: static (compiler) plus dynamic (launch) memory."""
        static = self.resources.local_memory_bytes
        return None if static is None else static + self.dynamic_local_bytes


@dataclass
class Inspection:
    kernel: str
    backend: str
    target: str  # what it was compiled for: a device, or an architecture with no GPU
    options: list[str]
    params: dict
    entries: list[EntryReport]  # the other functions in launch order, the step's own last
    files: dict[str, str] = field(default_factory=dict)  # file name -> text, summary.md included
    notes: list[str] = field(default_factory=list)

    @property
    def main(self) -> EntryReport:
        return self.entries[-1]


def find_tool(name: str, package: Optional[str] = None) -> Optional[str]:
    """A CUDA binary from its pip package (nvidia/cu*/bin/<name>), else from PATH."""
    if package:
        try:
            for file in importlib.metadata.files(package) or ():
                if file.name == name and file.parent.name == "bin":
                    located = Path(file.locate())
                    if located.is_file():
                        return str(located)
        except importlib.metadata.PackageNotFoundError:
            pass
    return shutil.which(name)


def disassemble(cubin: bytes, lock_held: bool = False) -> tuple[Optional[str], str]:
    """(SASS text, how it was made) or (None, what was missing or failed). A disassembly is
    kept in the compile cache on disk (runner/backends/nvrtc.py) by the cubin's hash and the
    tool's, made under that entry's lock, so a sweep's compile pool makes it after the compile
    (runner/sweep/precompile.py) and the job that runs the program waits for it and reads it.
    `lock_held`: the caller holds that lock already (`sass_lock`)."""
    path = _sass_cache_path(cubin)
    kept = _kept_sass(path)
    if kept is not None:
        return kept
    if path is None:
        return _disassemble(cubin)
    from runner.backends.nvrtc import cache_write, entry_lock

    with contextlib.nullcontext() if lock_held else entry_lock(path):
        kept = _kept_sass(path)  # made while another process or thread held the lock
        if kept is not None:
            return kept
        sass, how = _disassemble(cubin)
        if sass:
            cache_write(path, {"sass": sass, "how": how})
    return sass, how


def sass_lock(cubin: bytes):
    """The lock `cubin`'s disassembly is made under (a context manager; none without a cache or
    a disassembler): taken before the program's entry is written, a job that finds the program
    then waits for its SASS."""
    from runner.backends.nvrtc import entry_lock

    path = _sass_cache_path(cubin)
    return entry_lock(path) if path is not None else contextlib.nullcontext()


def _kept_sass(path: Optional[Path]) -> Optional[tuple[str, str]]:
    if path is None:
        return None
    try:
        kept = json.loads(path.read_text())
        return kept["sass"], kept["how"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sass_cache_path(cubin: bytes) -> Optional[Path]:
    from runner.backends.nvrtc import cache_folder

    folder = cache_folder()
    tools = [find_tool(name, package) for name, package, _ in DISASSEMBLERS]
    if folder is None or not any(tools):
        return None
    identity = hashlib.sha256(cubin)
    for tool in tools:
        if tool is not None:
            stat = os.stat(tool)
            identity.update(f"{tool}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return folder / "sass" / f"{identity.hexdigest()}.json"


def _disassemble(cubin: bytes) -> tuple[Optional[str], str]:
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "kernel.cubin")
        path.write_bytes(cubin)
        for name, package, args in DISASSEMBLERS:
            tool = find_tool(name, package)
            if tool is None:
                failures.append(f"{name} not found (pip install {package})")
                continue
            done = subprocess.run([tool, *args, str(path)], capture_output=True, text=True,
                                  timeout=120)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout, f"{name} {' '.join(args)} ({tool})"
            failures.append(f"{name} failed: {(done.stderr or done.stdout).strip()[:200]}")
    return None, "no SASS: " + "; ".join(failures)


def barriers_per_function(log: str) -> dict[str, int]:
    """ptxas' `used N barriers` per function (absent from its report when a function has none)."""
    found, current = {}, None
    for line in log.splitlines():
        if (match := _FUNCTION.search(line)) is not None:
            current = match.group(1)
            found.setdefault(current, 0)
        elif current is not None and (match := _BARRIERS.search(line)) is not None:
            found[current] = int(match.group(1))
    return found


def _ptxas_lines(log: str) -> str:
    lines = [line for line in log.splitlines() if "ptxas" in line]
    return "\n".join(lines) + "\n" if lines else ""


def _binary_kind(binary: bytes) -> str:
    if binary.startswith(b"\x7fELF"):
        return "an ELF object"
    if binary.startswith(b"BC\xc0\xde") or binary.startswith(b"\xde\xc0\x17\x0b"):
        return "LLVM bitcode"
    if binary.lstrip().startswith(b"//") or b".version" in binary[:4096]:
        return "PTX text"
    return "an opaque driver binary"


def inspect_cuda(kernel: str, source: str, file_name: str, entries: list[str], defines: dict,
                 compute_capability: int, max_registers: Optional[int], target: str,
                 include_dirs: tuple = ()) -> Inspection:
    from runner.backends.nvrtc import compile_cuda  # cached: a run's own compile is reused

    output = compile_cuda(source, file_name, defines, compute_capability, max_registers,
                          include_dirs, name_expressions=entries)
    reported = parse_ptxas_report(output.log)
    barriers = barriers_per_function(output.log)
    sass, how = disassemble(output.cubin)
    functions = parse_sass(sass) if sass else {}
    reports = []
    for entry in entries:
        symbol = output.lowered.get(entry, entry)  # a C++ entry's mangled name in the cubin
        instructions = functions.get(symbol)
        loop = main_loop(instructions) if instructions else None
        reports.append(EntryReport(
            entry, reported.get(symbol, KernelResources()), barriers.get(symbol),
            InstructionMix.of(instructions) if instructions else None,
            InstructionMix.of(loop) if loop else None))
    main = entries[-1]
    inspection = Inspection(kernel, "cuda", target, list(output.options), dict(defines), reports)
    for entry in entries:
        if output.lowered.get(entry, entry) != entry:
            inspection.notes.append(f"`{entry}` is `{output.lowered[entry]}` in the cubin "
                                    "(NVRTC's lowered name)")
    inspection.files[f"{entry_label(main)}.ptx"] = output.ptx or "(NVRTC gave no PTX)\n"
    inspection.files["ptxas.txt"] = _ptxas_lines(output.log) or output.log or "(empty)\n"
    if sass:
        inspection.files[f"{entry_label(main)}.sass"] = sass
        inspection.notes.append(f"SASS by {how}")
    else:
        inspection.notes.append(how)
    return inspection


def inspect_opencl(kernel: str, backend, program, file_name: str, entries: list[str],
                   defines: dict) -> Inspection:
    import pyopencl as cl

    info = backend.device_info()
    log = program.log or ""
    barriers = barriers_per_function(log)
    reports = [EntryReport(entry, program.resources.get(entry, KernelResources()),
                           barriers.get(entry)) for entry in entries]
    inspection = Inspection(kernel, "opencl", f"{info.name} ({info.platform})",
                            list(program.options), dict(defines), reports)
    inspection.files["build_log.txt"] = log or "(the driver printed nothing)\n"
    binary, why = None, ""
    try:  # the backend keeps its cl.Program with the compiled program
        handle = program.keepalive
        if not isinstance(handle, cl.Program):
            kernel = next(k for k in program.kernels.values() if k is not None)
            handle = kernel.get_info(cl.kernel_info.PROGRAM)
        binaries = handle.get_info(cl.program_info.BINARIES)
        binary = bytes(binaries[0]) if binaries else None
    except Exception as error:  # a driver that cannot hand its binary back
        why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    main = entries[-1]
    if info.is_nvidia_gpu:
        if binary:
            inspection.files[f"{entry_label(main)}.ptx"] = binary.rstrip(b"\0").decode(errors="replace")
            inspection.notes.append("PTX from the program binary (NVIDIA's OpenCL binary is PTX)")
        else:
            inspection.notes.append(f"the driver gave no program binary ({why or 'empty'})")
        inspection.files["ptxas.txt"] = _ptxas_lines(log) or "(no ptxas report in the log)\n"
        inspection.notes.append("no SASS: NVIDIA's OpenCL hands back PTX, not the cubin it runs")
    else:
        kind = (f"its program binary is {_binary_kind(binary)} of {len(binary):,} bytes, not "
                "disassembled here" if binary else f"it gives no program binary ({why or 'empty'})")
        inspection.notes.append(
            f"{info.platform} on a {info.device_type}: {kind}. This driver reports no registers, spills, stack or barriers "
            "(shown as —); it does report per-kernel local memory, private memory and the "
            "largest work-group (below). PTX, SASS and an instruction mix need NVIDIA: "
            "backend=cuda (no GPU needed) or NVIDIA's OpenCL.")
    return inspection


# --- the summary: one table, entries as columns ---------------------------------------------

def _n(value) -> str:
    return "—" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _widths(mix: Optional[InstructionMix], base: str) -> str:
    if mix is None:
        return "—"
    return " / ".join(str(mix.width_count(base, w)) for w in (32, 64, 128))


def with_wide(mix: Optional[InstructionMix], base: str) -> str:
    """`147 (102)`: all such instructions, and in brackets the 128-bit ones."""
    if mix is None:
        return "—"
    return f"{mix.count(base)} ({mix.width_count(base, 128)})"


def _mix_row(pick: Callable[[InstructionMix], str], loop: bool = False):
    def row(report: EntryReport) -> str:
        mix = report.loop if loop else report.mix
        return "—" if mix is None else pick(mix)
    return row


RESOURCE_ROWS = [
    ("registers", lambda r: _n(r.resources.registers)),
    ("spill stores / loads (B)",
     lambda r: f"{_n(r.resources.spill_store_bytes)} / {_n(r.resources.spill_load_bytes)}"),
    ("stack (B)", lambda r: _n(r.resources.stack_bytes)),
    ("shared/local memory (B)", lambda r: _n(r.local_memory_bytes)
     + (f" ({_n(r.dynamic_local_bytes)} dynamic)" if r.dynamic_local_bytes else "")),
    ("private memory (B)", lambda r: _n(r.resources.private_memory_bytes)),
    ("barriers (ptxas)", lambda r: _n(r.barriers)),
    ("largest work-group (driver)", lambda r: _n(r.resources.max_work_group_size)),
]
MIX_ROWS = [
    ("instructions (static, no NOP)", _mix_row(lambda m: _n(m.total))),
    ("FFMA (share)", _mix_row(lambda m: f"{m.ffma:,} ({_pct(m.ffma_share)})")),
    ("tensor-core products (HMMA, HGMMA)", _mix_row(lambda m: _n(m.tensor))),
    ("other FP32", _mix_row(lambda m: _n(m.fp32_other))),
    ("integer, moves, predicates", _mix_row(lambda m: _n(m.integer_and_other))),
    ("branches and control", _mix_row(lambda m: _n(m.control))),
    ("LDS 32 / 64 / 128-bit", _mix_row(lambda m: _widths(m, "LDS"))),
    ("STS 32 / 64 / 128-bit", _mix_row(lambda m: _widths(m, "STS"))),
    ("LDG 32 / 64 / 128-bit", _mix_row(lambda m: _widths(m, "LDG"))),
    ("LDGSTS 32 / 64 / 128-bit (cp.async)", _mix_row(lambda m: _widths(m, "LDGSTS"))),
    ("STG 32 / 64 / 128-bit", _mix_row(lambda m: _widths(m, "STG"))),
    ("LDL / STL (local memory)", _mix_row(lambda m: f"{m.count('LDL')} / {m.count('STL')}")),
    ("TMA tile copies (UTMALDG, UTMASTG, UBLKCP, ...)", _mix_row(lambda m: _n(m.tma))),
    ("BAR", _mix_row(lambda m: _n(m.barriers))),
    ("mbarrier and wgmma ordering (SYNCS, WARPGROUP)", _mix_row(lambda m: _n(m.async_order))),
    ("FFMA bank conflicts (estimate)", _mix_row(lambda m: _n(m.bank_conflicts))),
    ("main loop: instructions", _mix_row(lambda m: _n(m.total), loop=True)),
    ("main loop: FFMA (share)",
     _mix_row(lambda m: f"{m.ffma:,} ({_pct(m.ffma_share)})", loop=True)),
    ("main loop: tensor-core products", _mix_row(lambda m: _n(m.tensor), loop=True)),
    ("main loop: LDS 32 / 64 / 128-bit", _mix_row(lambda m: _widths(m, "LDS"), loop=True)),
    ("main loop: LDG / LDGSTS",
     _mix_row(lambda m: f"{m.count('LDG')} / {m.count('LDGSTS')}", loop=True)),
    ("main loop: TMA tile copies", _mix_row(lambda m: _n(m.tma), loop=True)),
    ("main loop: BAR", _mix_row(lambda m: _n(m.barriers), loop=True)),
    ("main loop: SYNCS / WARPGROUP",
     _mix_row(lambda m: f"{m.count('SYNCS')} / {m.count('WARPGROUP')}", loop=True)),
    ("main loop: FFMA bank conflicts", _mix_row(lambda m: _n(m.bank_conflicts), loop=True)),
    ("main loop: FFMAs moving their accumulator",
     _mix_row(lambda m: _n(m.moved_accumulators), loop=True)),
]


def summary_rows(inspection: Inspection) -> list[tuple[str, list[str]]]:
    rows = list(RESOURCE_ROWS)
    if any(report.mix is not None for report in inspection.entries):
        rows += MIX_ROWS
    return [(label, [pick(report) for report in inspection.entries]) for label, pick in rows]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def summary_markdown(inspection: Inspection) -> str:
    params = " ".join(f"{k}={v}" for k, v in inspection.params.items()) or "(none)"
    header = [""] + [report.entry for report in inspection.entries]
    table = markdown_table(header, [[label, *values] for label, values in
                                    summary_rows(inspection)])
    files = ", ".join(f"`{name}`" for name in inspection.files if name != "summary.md")
    text = [f"# {inspection.kernel} · {inspection.backend} · {inspection.target}", "",
            f"Parameters: {params}  ", f"Compiler options: `{' '.join(inspection.options)}`", "",
            table, f"Files: {files}", ""]
    text += [f"- {note}" for note in inspection.notes]
    if any(report.mix is not None for report in inspection.entries):
        text += ["- Instruction counts are static: each SASS instruction of the function once "
                 "(NOPs left out); the main loop is the loop, from a backward branch to its "
                 "target, that holds the most FFMAs and tensor-core products (the "
                 "shortest of those: a steady, "
                 "unguarded copy of a loop body rather than its guarded copy), counted once "
                 "per trip.",
                 f"- {BANK_RULE}",
                 "- FFMAs moving their accumulator: FFMAs whose destination register is not "
                 "their addend's (ptxas shuffles accumulators between registers where register "
                 "pressure or a branch in the loop makes it; in matmul_9 on an H100 such FFMAs "
                 "stalled at dispatch 2-5x as often as those accumulating in place). A count, "
                 "not a ranking: fewer is not always faster."]
    return "\n".join(text) + "\n"


def inspect_program(backend, source: str, file_name: str, plan, program,
                    include_dirs: tuple = ()) -> Inspection:
    """The inspection of a program the backend compiled for `plan`, with its files."""
    main = plan.main_launch.entry  # last: a pass that sums split-K slices runs after it
    entries = [entry for entry in plan.entries if entry != main] + [main]
    if backend.name == "cuda":
        target = (backend.device_info().name if backend.has_gpu
                  else f"sm_{backend.compute_capability}, no GPU")
        inspection = inspect_cuda(plan.name, source, file_name, entries, plan.defines,
                                  backend.compute_capability, plan.max_registers, target,
                                  tuple(include_dirs))
    else:
        inspection = inspect_opencl(plan.name, backend, program, file_name, entries,
                                    plan.defines)
    asked: dict[str, int] = {}
    for launch in plan.launches:
        asked[launch.entry] = max(asked.get(launch.entry, 0), launch.local_bytes)
    for report in inspection.entries:
        report.dynamic_local_bytes = asked.get(report.entry, 0)
    inspection.files["summary.md"] = summary_markdown(inspection)
    return inspection
