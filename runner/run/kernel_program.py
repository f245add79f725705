"""A kernel's program: the source compiled with its defines once per backend and process
(`compile_once`), written out with them as the exact source recorded (`source_with_defines`),
its launches' arguments checked against its functions' parameters where the backend can tell
them (`check_signatures`), and bound to its buffers (`PreparedRun`, `bind_tensor_map`,
`scalar_value`). runner/run/execute.py's `prepare` puts these together for a run."""

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from runner.backends.base import Backend, CompiledProgram
from runner.backends.includes import local_includes
from runner.config.spec import KernelPlan, ScalarArg, TensorMapArg
from runner.errors import RunError


def source_with_defines(source: str, options: list[str], defines: dict[str, int]) -> str:
    """The exact source as compiled: the -D defines written out, so the file compiles alone."""
    header = ["// compiled by gemmlab with: " + " ".join(options)]
    header += [f"#define {name} {value}" for name, value in defines.items()]
    return "\n".join(header) + "\n" + source


@dataclass
class PreparedRun:
    """A compiled kernel with its buffers bound: `enqueue()` puts every launch on the queue."""
    file_name: str
    source_artifact: str  # the exact source with its defines
    program: CompiledProgram
    buffers: dict
    enqueue: Callable[[], list]
    source: str = ""  # as read, before the defines
    guarded: dict = field(default_factory=dict)  # name -> GuardedBuffer around `buffers[name]`
    kernel_name: str = ""
    size_label: str = ""
    # name -> (pristine device copy, bytes): an output whose initial contents the kernel reads
    # (sgemm with beta != 0), copied back in before the checked launch and every timed sample.
    initial: dict = field(default_factory=dict)
    blas: tuple = (1.0, 0.0)  # sgemm's (alpha, beta), for the check
    include_dirs: tuple = ()  # the source's folder: the files beside it that it includes
    headers: dict = field(default_factory=dict)  # those files: name -> text (recorded)

    def restore(self, backend: Backend) -> None:
        """Copy each such output's initial contents back in (outside any timed span)."""
        for name, (pristine, nbytes) in self.initial.items():
            backend.device_copy(self.buffers[name], pristine, nbytes)
        if self.initial:
            backend.synchronize()


# Per backend object, never per id(): a backend that is gone can leave its id to a new one on
# another device, which must not be handed the old one's programs.
_programs: "weakref.WeakKeyDictionary[Backend, dict[tuple, CompiledProgram]]" = \
    weakref.WeakKeyDictionary()


def program_key(source: str, file_name: str, entries: list[str],
                 defines: dict[str, int], max_registers, include_dirs: Sequence[str] = ()
                 ) -> tuple:
    folder = Path(include_dirs[0]) if include_dirs else None
    headers = tuple((str(path), path.read_bytes()) for path in local_includes(source, folder)) \
        if folder is not None else ()  # an edited header beside the source: another program
    return (source, file_name, tuple(entries), tuple(sorted(defines.items())),
            max_registers, tuple(include_dirs), headers)


def compile_once(backend: Backend, source: str, file_name: str, entries: list[str],
                 defines: dict[str, int], max_registers,
                 include_dirs: Sequence[str] = ()) -> CompiledProgram:
    """Compile a source with its defines once per backend and process (a sweep's jobs that
    differ only in size, or a re-run, reuse the program, its log and its resource report).
    `include_dirs`: the source's own folder, for the files beside it that it includes."""
    key = program_key(source, file_name, entries, defines, max_registers, include_dirs)
    programs = _programs.setdefault(backend, {})
    if key not in programs:
        programs[key] = backend.compile(source, file_name, entries, defines, max_registers,
                                        include_dirs=tuple(include_dirs))
    return programs[key]


def check_overlap_waits(plan: KernelPlan, backend_name: str, file_name: str, source: str):
    """A CUDA launch that overlaps the one before it reads that one's results only after
    `griddepcontrol.wait`; a source without one would race its pre-pass, so it is refused."""
    overlapping = [launch.entry for launch in plan.launches if launch.overlap_previous]
    if backend_name == "cuda" and overlapping and "griddepcontrol.wait" not in source:
        raise RunError(f"{plan.name}: {overlapping[0]} overlaps the launch before it "
                       f"(overlap_previous), but {file_name} never runs griddepcontrol.wait, so "
                       "it could read that launch's results before they are written")


def bind_tensor_map(backend: Backend, plan: KernelPlan, arg: TensorMapArg, guarded: dict):
    """A tensor map over the buffer the kernel gets (the view between the guards, 64 KiB into
    its allocation, so 16-byte aligned as TMA asks), after checking that every element it can
    reach is inside that buffer: TMA reads nothing outside rows x cols."""
    buffer = guarded[arg.buffer]
    if arg.floats > buffer.count:
        raise RunError(f"{plan.name}: {arg} reaches {arg.floats} floats of {arg.buffer}, which "
                       f"has {buffer.count}")
    return backend.tensor_map(buffer.inner, arg.rows, arg.cols, arg.ld, arg.box_rows,
                              arg.box_cols, arg.swizzle)


def scalar_value(arg: ScalarArg):
    """A scalar as the kernel takes it: np.float32 (a Python float would go as a double to
    CUDA), or an int, which both backends pass as a 32-bit int."""
    return np.float32(arg.value) if arg.kind == "float" else int(arg.value)


def _arg_kind(arg, plan: KernelPlan) -> str:
    if isinstance(arg, ScalarArg):
        return arg.kind
    if isinstance(arg, TensorMapArg):
        return "tensor_map"
    return "int" if arg in plan.size.as_names() else "pointer"


def check_signatures(plan: KernelPlan, program: CompiledProgram, file_name: str,
                     backend_name: str) -> None:
    """Each launch's arguments against its function's parameters, where the backend can tell
    them (CompiledProgram.signatures): their number, and int / float / pointer for each. A
    trailing OpenCL `__local` parameter is the launch's `local_bytes`."""
    for launch in plan.launches:
        declared = program.signatures.get(launch.entry)
        if declared is None:
            continue  # this driver cannot tell: unchecked
        declared = list(declared)
        if launch.local_bytes and declared and declared[-1] == "local":
            declared.pop()
        given = [_arg_kind(arg, plan) for arg in launch.args]
        shown = ", ".join(str(arg) for arg in launch.args)
        if len(given) != len(declared):
            raise RunError(f"{plan.name}: launch {launch.entry} passes {len(given)} arguments "
                           f"({shown}) but {file_name} declares {len(declared)} "
                           f"({', '.join(declared)}) on {backend_name}")
        for index, (arg, want, have) in enumerate(zip(launch.args, given, declared)):
            if want != have and not have.startswith("other"):
                raise RunError(f"{plan.name}: launch {launch.entry}: argument {index + 1} "
                               f"({arg}) is {'an' if want == 'int' else 'a'} {want}, but "
                               f"parameter {index + 1} of {file_name}'s {launch.entry} is "
                               f"{'an' if have == 'int' else 'a'} {have}")
