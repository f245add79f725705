"""OpenCL through pyopencl: PoCL (or Intel's CPU runtime) on a CPU, a vendor's driver on a GPU."""

import logging
import os
import re
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from runner.backends import driver_env
from runner.backends.base import (POISON, Backend, CompiledProgram, DeviceInfo, KernelResources,
                                  pci_address)
from runner.backends.build_log import first_error, pyopencl_build_log
from runner.backends.includes import check_includes, include_options, yielding_headers
from runner.backends.ptxas import parse_ptxas_report
from runner.errors import BuildError, Refused, RunError

driver_env.prepare()  # before pyopencl can ask the ICD loader for platforms: it reads them once
import pyopencl as cl  # noqa: E402

log = logging.getLogger(__name__)

# Spins on the GPU's nanosecond timer while the host enqueues a step's launches (time_ms).
_HOLD_SOURCE = r"""
__kernel void gemmlab_hold_queue(const ulong ns) {
    ulong start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""
HOLD_NS = 1_000_000  # far longer than NVIDIA's OpenCL takes to enqueue a step's launches

_DEVICE_TYPES = {
    "gpu": cl.device_type.GPU,
    "cpu": cl.device_type.CPU,
    "accelerator": cl.device_type.ACCELERATOR,
}


def _type_name(device: "cl.Device") -> str:
    """The device's own kind, as recorded (`device.type`): "gpu", "cpu", "accelerator", or
    "simulator" for Oclgrind, which claims every type at once."""
    if _is_simulator(device):
        return "simulator"
    for name, flag in _DEVICE_TYPES.items():
        if device.type & flag:
            return name
    return "other"


def _matches(selector: Optional[str], index: int, name: str) -> bool:
    """A selector is an index ("0") or a case-insensitive part of the name ("nvidia")."""
    if selector is None:
        return True
    selector = str(selector).strip()
    if selector.isdigit():
        return int(selector) == index
    return selector.lower() in name.lower()


def _is_simulator(device: "cl.Device") -> bool:
    # Oclgrind calls itself a GPU (and a CPU and an accelerator); it runs kernels thousands of
    # times slower than the CPU: chosen only when named, never for a device type.
    return "oclgrind" in device.platform.name.lower()


def _named(platform: Optional[str], device: Optional[str]) -> bool:
    """Whether the selectors name a platform or device (not an index): only then may the
    simulator be chosen (backend.platform=oclgrind, as check.sanitizer=oclgrind sets it)."""
    return any(s is not None and not str(s).strip().isdigit() for s in (platform, device))


def devices_here(platforms: Sequence["cl.Platform"]) -> str:
    """Every OpenCL device there is, as `platform: device (type)`, for a line that refuses."""
    return "; ".join(f"{p.name.strip()}: {d.name.strip()} ({_type_name(d)})"
                     for p in platforms for d in _devices(p)) or "none"


def _devices(platform: "cl.Platform") -> list:
    try:
        return platform.get_devices()
    except cl.Error:  # a platform without devices
        return []


_PROBE_SOURCE = "__kernel void probe(__global float *x) { x[get_global_id(0)] += 1.0f; }"
_build_failures: dict[int, Optional[str]] = {}


def build_failure(device: "cl.Device") -> Optional[str]:
    """Why the device's compiler cannot build a trivial kernel, or None when it can (cached)."""
    key = device.int_ptr
    if key not in _build_failures:
        try:
            _build(cl.Program(cl.Context([device]), _PROBE_SOURCE), device)
            _build_failures[key] = None
        except cl.Error as error:
            lines = [line.strip() for line in str(error).splitlines() if "error" in line.lower()]
            _build_failures[key] = (lines[-1] if lines else str(error).splitlines()[0])[:200]
    return _build_failures[key]


def _working_cpu(candidates: list) -> tuple[Optional["cl.Device"], list[str]]:
    """The first CPU device whose compiler works, PoCL first; and why the others were passed."""
    cpus = sorted((d for d in candidates if _type_name(d) == "cpu"),
                  key=lambda d: "portable computing language" not in d.platform.name.lower())
    passed = []
    for d in cpus:
        failure = build_failure(d)
        if failure is None:
            return d, passed
        passed.append(f"{d.platform.name.strip()} cannot build kernels here ({failure})")
    return None, passed


def _no_working_cpu(passed: list[str]) -> RunError:
    return RunError("OpenCL: no CPU device can build kernels: " + "; ".join(passed) +
                    ". PoCL from pip (LLVM 14) cannot target CPUs newer than LLVM 14 knows; "
                    "Intel's CPU runtime can: pip install intel-opencl-rt intel-cmplr-lib-rt")


NVIDIA_ICD = "/etc/OpenCL/vendors/nvidia.icd"


def _unregistered_nvidia_hint(platform: Optional[str]) -> str:
    """When NVIDIA's platform was asked for and CUDA sees a GPU, the driver is there but the
    OpenCL loader was never told about it (common in containers): say how to register it."""
    if platform is None or "nvidia" not in str(platform).lower():
        return ""
    from runner.backends.cuda import gpu_count  # CuPy only on this error path

    if gpu_count() == 0:
        return ""
    return (f"; CUDA sees {gpu_count()} NVIDIA GPU(s), so NVIDIA's OpenCL driver is not "
            f"registered with the OpenCL loader: create {NVIDIA_ICD} holding the line "
            "libnvidia-opencl.so.1 (or set OCL_ICD_VENDORS to a folder with such a .icd file), "
            "or run with backend=cuda")


def no_device_of_type(device_type: str, platform: Optional[str], device: Optional[str],
                      platforms: Sequence["cl.Platform"], candidates: Sequence) -> str:
    """One line: no device of the type asked for among the candidates (the devices of the
    platform and device named), the devices there are, and what to ask for instead."""
    every = [d for p in platforms for d in _devices(p)]
    kinds = sorted({_type_name(d) for d in candidates} - {"simulator", device_type})
    allowed = ", ".join(f"backend.device_type={kind}" for kind in [*kinds, "auto"])
    simulator = ("; Oclgrind's simulator runs only when named (backend.platform=oclgrind, "
                 "check.sanitizer=oclgrind)" if any(map(_is_simulator, every)) else "")
    return (f"OpenCL: backend.device_type={device_type}: no {_KIND_NAMES[device_type]} here"
            + _within(platform, device) + f"; the devices there are: {devices_here(platforms)}; "
            f"allowed: {allowed}" + simulator
            + (_unregistered_nvidia_hint("nvidia") if device_type == "gpu" else ""))


def _within(platform: Optional[str], device: Optional[str]) -> str:
    named = " ".join(f"backend.{key}={value}" for key, value in
                     (("platform", platform), ("device", device)) if value is not None)
    return f" on {named}" if named else ""


_KIND_NAMES = {"gpu": "GPU", "cpu": "CPU", "accelerator": "accelerator"}


def select_device(platform: Optional[str], device: Optional[str],
                  device_type: str) -> tuple["cl.Device", str]:
    """The device the config asks for, and a sentence saying which one it is and why."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as error:
        raise RunError(f"OpenCL: no platform found ({error}); "
                       "install one, e.g. pip install 'pyopencl[pocl]'") from None
    chosen_platforms = [p for i, p in enumerate(platforms) if _matches(platform, i, p.name)]
    if not chosen_platforms:
        names = ", ".join(f"{i}: {p.name}" for i, p in enumerate(platforms))
        raise RunError(f"OpenCL: backend.platform={platform} matches no platform ({names})"
                       + _unregistered_nvidia_hint(platform))

    candidates = []  # (device, index within its platform)
    for p in chosen_platforms:
        for i, d in enumerate(p.get_devices()):
            if _matches(device, i, d.name):
                candidates.append(d)
    if not candidates:
        raise RunError(f"OpenCL: backend.device={device} matches no device on "
                       f"{', '.join(p.name for p in chosen_platforms)}")

    if device_type == "auto":
        if not _named(platform, device):  # a simulator is for race checks, never a default
            real = [d for d in candidates if not _is_simulator(d)]
            if not real:
                raise RunError(f"OpenCL: no device{_within(platform, device)} but Oclgrind's "
                               "simulator, which runs only when named (backend.platform="
                               f"oclgrind); the devices there are: {devices_here(platforms)}")
            candidates = real
        gpus = [d for d in candidates if _type_name(d) == "gpu"]
        if gpus:
            return gpus[0], "a GPU (the default picks a GPU when there is one)"
        cpu, passed = _working_cpu(candidates)
        if cpu is not None:
            return cpu, "no GPU found, so a CPU (PoCL first)" + (
                f"; {'; '.join(passed)}" if passed else "")
        if passed:
            raise _no_working_cpu(passed)
        if all(_is_simulator(d) for d in candidates):
            return candidates[0], "Oclgrind's simulator, named by backend.platform/device"
        return candidates[0], "no GPU or CPU found, so the first device"
    typed = [d for d in candidates if _type_name(d) == device_type]
    if not typed:
        raise Refused(no_device_of_type(device_type, platform, device, platforms,
                                      candidates))
    if device_type == "cpu":
        cpu, passed = _working_cpu(typed)
        if cpu is None:
            raise _no_working_cpu(passed)
        return cpu, "backend.device_type=cpu" + (f"; {'; '.join(passed)}" if passed else "")
    return typed[0], f"backend.device_type={device_type}"


def _nvidia_pci_bus_id(device: "cl.Device") -> Optional[int]:
    try:  # cl_nv_device_attribute_query; other drivers do not have it
        return int(device.pci_bus_id_nv)
    except (cl.Error, AttributeError):
        return None


def _nvidia_pci_address(device: "cl.Device") -> Optional[str]:
    try:  # cl_nv_device_attribute_query: domain, bus and slot (the PCI device number)
        domain = int(device.get_info(cl.device_info.PCI_DOMAIN_ID_NV))
        return pci_address(domain, int(device.pci_bus_id_nv), int(device.pci_slot_id_nv))
    except (cl.Error, AttributeError, ValueError):
        return None


def _nvidia_compute_capability(device: "cl.Device") -> Optional[str]:
    try:  # cl_nv_device_attribute_query, as CUDA's "major.minor"
        return f"{int(device.compute_capability_major_nv)}.{int(device.compute_capability_minor_nv)}"
    except (cl.Error, AttributeError):
        return None


@contextmanager
def _stderr_kept(into: list):
    """Hold what is written to the process's stderr (file descriptor 2) meanwhile and append it
    to `into`: clang inside PoCL and Oclgrind prints "1 error generated." there itself."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as kept:
            os.dup2(kept.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                kept.seek(0)
                into.append(kept.read().decode(errors="replace"))
    finally:
        os.close(saved)


def _build(program: "cl.Program", device: "cl.Device", options: Sequence[str] = (),
           printed: Optional[list] = None) -> "cl.Program":
    """program.build, with the terminal kept to gemmlab's own lines: a compiler that says
    anything at all (NVIDIA's on every build, clang's warnings in PoCL) would otherwise show
    pyopencl's CompilerWarning ("Non-empty compiler output encountered") and its source line on
    every run, and clang's "1 warning generated." on stderr. What the compiler says is in the
    build log, which compile() records, and what it wrote to stderr is appended to `printed`.
    Every build in this module goes through here."""
    with warnings.catch_warnings(), _stderr_kept([] if printed is None else printed):
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return program.build(options=list(options), devices=[device])


def _build_error(message: str, source_name: str, options: Sequence[str],
                 printed: str) -> BuildError:
    """The compiler's first error, with the user's file and line, from pyopencl's build error.

    The log is read from the error's text: where pyopencl builds through its own cache (Intel's
    runtime, Oclgrind), the program object holds no log after a failed build, and asking it for
    one starts a new, unbuilt program (and a "Pre-build attribute access" warning)."""
    log_text = pyopencl_build_log(message) or message
    saved = re.search(r"\(source saved as (\S+\.cl)\)", message)
    if saved and Path(saved.group(1)).parent == Path(tempfile.gettempdir()):
        Path(saved.group(1)).unlink(missing_ok=True)  # pyopencl's copy of the source, per failure
    first = first_error(log_text, source_name, fallback=message.splitlines()[0])
    full_log = (f"options: {' '.join(options)}\n\n{log_text}" +
                (f"\n(printed on stderr)\n{printed}" if printed.strip() else ""))
    return BuildError(f"OpenCL build of {source_name} failed: {first}", full_log)


def _yielded_folder(texts: Mapping[str, str]) -> str:
    """A folder holding the headers beside a source as the compiler gets them when the run's
    defines win over theirs (includes.yielding_headers), searched before the source's own
    folder; named by their content, so one copy serves every build that needs it."""
    import hashlib

    digest = hashlib.sha256(repr(sorted(texts.items())).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"gemmlab-yielded-{digest}"
    for relative, text in texts.items():
        path = folder / relative
        if not path.is_file() or path.read_text(errors="replace") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_text(text)
            os.replace(partial, path)  # whole, for a build in another process meanwhile
    return str(folder)


_SCALAR_KINDS = {"int": "int", "float": "float"}


def kernel_signature(kernel: "cl.Kernel") -> Optional[tuple[str, ...]]:
    """The kind of each parameter (base.CompiledProgram.signatures), from the kernel's argument
    info (built with -cl-kernel-arg-info); None where the driver does not give it."""
    kinds = []
    try:
        for index in range(kernel.num_args):
            type_name = kernel.get_arg_info(index, cl.kernel_arg_info.TYPE_NAME).strip()
            qualifier = kernel.get_arg_info(index, cl.kernel_arg_info.ADDRESS_QUALIFIER)
            if type_name.endswith("*"):
                kinds.append("local" if qualifier == cl.kernel_arg_address_qualifier.LOCAL
                             else "pointer")
            else:
                kinds.append(_SCALAR_KINDS.get(type_name, f"other {type_name}"))
    except (cl.Error, AttributeError):
        return None
    return tuple(kinds)


class OpenCLBackend(Backend):
    name = "opencl"

    def __init__(self, platform: Optional[str] = None, device: Optional[str] = None,
                 device_type: str = "auto"):
        self.device, self.selection_reason = select_device(platform, device, device_type)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self._info = self._read_device_info()

    def _read_device_info(self) -> DeviceInfo:
        d = self.device
        return DeviceInfo(
            name=d.name.strip(),
            vendor=d.vendor.strip(),
            platform=d.platform.name.strip(),
            driver=f"{d.driver_version.strip()} ({d.version.strip()})",
            device_type=_type_name(d),
            global_memory_bytes=d.global_mem_size,
            max_alloc_bytes=d.max_mem_alloc_size,
            local_memory_bytes=d.local_mem_size,
            max_work_group_size=d.max_work_group_size,
            max_work_item_sizes=tuple(d.max_work_item_sizes),
            compute_units=d.max_compute_units,
            compute_capability=_nvidia_compute_capability(d),
            pci_bus_id=_nvidia_pci_bus_id(d),
            pci_address=_nvidia_pci_address(d),
            max_clock_mhz=float(d.max_clock_frequency) or None,
            cache_bytes=int(d.global_mem_cache_size) or None,
            float_vector_width=max(d.native_vector_width_float, d.preferred_vector_width_float),
        )

    def device_info(self) -> DeviceInfo:
        return self._info

    def compile(self, source: str, source_name: str, entries: Sequence[str],
                defines: Mapping[str, int], max_registers: Optional[int] = None,
                include_dirs: Sequence[str] = ()) -> CompiledProgram:
        check_includes(source, source_name, Path(include_dirs[0]) if include_dirs else None,
                       "opencl")
        for entry in entries:
            if not re.fullmatch(r"[A-Za-z_]\w*", entry):
                raise RunError(f"{source_name}: entry {entry!r} is not an OpenCL C kernel name "
                               "(C++ names and templates are for CUDA sources)")
        options = [f"-D{name}={int(value)}" for name, value in defines.items()]
        yielded, notes = yielding_headers(
            source, Path(include_dirs[0]) if include_dirs else None, defines)
        options += include_options(([_yielded_folder(yielded)] if yielded else [])
                                   + list(include_dirs))
        options.append("-cl-kernel-arg-info")  # the parameters' types: launches are checked
        if self._info.is_nvidia_gpu:
            options.append("-cl-nv-verbose")  # ptxas' register and spill report in the build log
            if self._info.compute_capability:  # e.g. 90: kernels guard sm_80+ inline PTX on it
                major, minor = self._info.compute_capability.split(".")
                options.append(f"-DGEMMLAB_NV_SM={int(major) * 10 + int(minor)}")
            if max_registers is not None:
                # OpenCL C has no __launch_bounds__, so the cap goes through NVIDIA's own flag
                # (its effect: docs/opencl-notes.md).
                options.append(f"-cl-nv-maxrregcount={int(max_registers)}")
        program = cl.Program(self.context, source)
        printed: list[str] = []  # what the compiler wrote to stderr: recorded, not shown
        try:
            _build(program, self.device, options, printed)
        except cl.RuntimeError as error:
            raise _build_error(str(error), source_name, options, "".join(printed)) from None
        build_log = program.get_build_info(self.device, cl.program_build_info.LOG) or ""
        build_log = "".join(f"gemmlab: {note}\n" for note in notes) + build_log
        build_log += "".join(printed)
        kernels, resources, signatures = {}, {}, {}
        reported = parse_ptxas_report(build_log)
        for entry in entries:
            try:
                kernel = cl.Kernel(program, entry)
            except cl.LogicError:
                raise RunError(f"{source_name} has no kernel named {entry}") from None
            kernels[entry] = kernel
            resources[entry] = self._kernel_resources(kernel, reported.get(entry))
            signatures[entry] = kernel_signature(kernel)
        return CompiledProgram(kernels, build_log, options, resources, keepalive=program,
                               signatures=signatures)

    def _kernel_resources(self, kernel: "cl.Kernel",
                          reported: Optional[KernelResources]) -> KernelResources:
        def query(param):
            try:
                return int(kernel.get_work_group_info(param, self.device))
            except cl.Error:
                return None  # the driver cannot tell: absent, not zero

        info = cl.kernel_work_group_info
        reported = reported or KernelResources()
        return KernelResources(
            registers=reported.registers,
            spill_store_bytes=reported.spill_store_bytes,
            spill_load_bytes=reported.spill_load_bytes,
            stack_bytes=reported.stack_bytes,
            local_memory_bytes=query(info.LOCAL_MEM_SIZE),
            private_memory_bytes=query(info.PRIVATE_MEM_SIZE),
            max_work_group_size=query(info.WORK_GROUP_SIZE),
        )

    def alloc(self, count: int) -> "cl.Buffer":
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=max(1, count) * 4)

    def upload(self, host: np.ndarray) -> "cl.Buffer":
        host = np.ascontiguousarray(host, dtype=np.float32)
        buffer = self.alloc(host.size)
        cl.enqueue_copy(self.queue, buffer, host).wait()
        return buffer

    def filled(self, count: int, bits: int) -> "cl.Buffer":
        buffer = self.alloc(count)
        cl.enqueue_fill_buffer(self.queue, buffer, np.uint32(bits), 0, buffer.size).wait()
        return buffer

    def write(self, buffer: "cl.Buffer", offset: int, host: np.ndarray) -> None:
        cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(host, dtype=np.float32),
                        dst_offset=offset * 4).wait()

    def view(self, buffer: "cl.Buffer", offset: int, count: int) -> "cl.Buffer":
        return buffer.get_sub_region(offset * 4, count * 4)

    def download(self, buffer: "cl.Buffer", shape: tuple[int, ...]) -> np.ndarray:
        host = np.empty(shape, dtype=np.float32)
        cl.enqueue_copy(self.queue, host, buffer).wait()
        return host

    def download_range(self, buffer: "cl.Buffer", offset: int, count: int) -> np.ndarray:
        host = np.empty(count, dtype=np.float32)
        cl.enqueue_copy(self.queue, host, buffer, src_offset=offset * 4).wait()
        return host

    def count_differences(self, first: "cl.Buffer", second: "cl.Buffer", count: int) -> int:
        import pyopencl.array as cl_array

        counter = getattr(self, "_difference_counter", None)
        if counter is None:
            from pyopencl.reduction import ReductionKernel

            counter = ReductionKernel(self.context, np.int64, neutral="0", reduce_expr="a+b",
                                      map_expr="first[i] != second[i]",
                                      arguments="__global const uint *first, "
                                                "__global const uint *second")
            self._difference_counter = counter
        words = [cl_array.Array(self.queue, (count,), np.uint32, data=buffer)
                 for buffer in (first, second)]
        return int(counter(*words, queue=self.queue).get())

    def poison(self, buffer: "cl.Buffer") -> None:
        cl.enqueue_fill_buffer(self.queue, buffer, POISON, 0, buffer.size).wait()

    def launch(self, kernel: "cl.Kernel", groups: Sequence[int], local: Sequence[int],
               args: Sequence[Any], local_bytes: int = 0,
               overlap_previous: bool = False) -> "cl.Event":  # in order: no overlap
        global_size = tuple(g * l for g, l in zip(groups, local))
        kernel_args = [np.int32(a) if isinstance(a, int) else a for a in args]
        if local_bytes:
            kernel_args.append(cl.LocalMemory(local_bytes))
        kernel.set_args(*kernel_args)
        try:
            return cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, tuple(local))
        except cl.Error as error:
            shape = "x".join(str(v) for v in local)
            info = cl.kernel_work_group_info
            limit = kernel.get_work_group_info(info.WORK_GROUP_SIZE, self.device)
            local_bytes = kernel.get_work_group_info(info.LOCAL_MEM_SIZE, self.device)
            raise RunError(f"the OpenCL driver refused to launch {kernel.function_name} with a "
                           f"{shape} work-group ({error}); for this kernel it reports at most "
                           f"{limit} work-items and {local_bytes} bytes of local memory, of the "
                           f"{self._info.local_memory_bytes} the device has") from None

    def device_copy(self, dst: "cl.Buffer", src: "cl.Buffer", nbytes: int) -> "cl.Event":
        return cl.enqueue_copy(self.queue, dst, src, byte_count=nbytes)

    def time_ms(self, enqueue: Callable[[], Sequence[Any]]) -> float:
        # A step's launches are all queued before the first may start, so the time between
        # them is the device's, not the host's enqueue time: behind a spin kernel on an NVIDIA
        # GPU, behind a user event elsewhere (measurements: docs/opencl-notes.md).
        if self._info.is_nvidia_gpu:
            self._hold_queue()
            events = list(enqueue())
        else:
            gate = cl.UserEvent(self.context)
            cl.enqueue_barrier(self.queue, wait_for=[gate])
            try:
                events = list(enqueue())
            finally:  # a failed enqueue must not leave the queue blocked
                gate.set_status(cl.command_execution_status.COMPLETE)
        events[-1].wait()
        # In-order queue: from the start of the first command to the end of the last.
        return (events[-1].profile.end - events[0].profile.start) * 1e-6

    def _hold_queue(self) -> None:
        """Enqueue a kernel that spins for HOLD_NS on the GPU's timer (NVIDIA inline PTX)."""
        if getattr(self, "_hold_kernel", None) is None:
            # NVIDIA's compiler says "overriding noinline attribute" for it: nothing to record
            program = _build(cl.Program(self.context, _HOLD_SOURCE), self.device)
            self._hold_kernel = cl.Kernel(program, "gemmlab_hold_queue")
        self._hold_kernel.set_args(np.uint64(HOLD_NS))
        cl.enqueue_nd_range_kernel(self.queue, self._hold_kernel, (1,), (1,))
        self.queue.flush()  # on the GPU now, while the step's launches are enqueued

    def synchronize(self) -> None:
        self.queue.finish()

    def flush_cache(self) -> None:
        if getattr(self, "_flush_buffer", None) is None:
            cache = int(self.device.global_mem_cache_size or 0)
            self._flush_bytes = max(2 * cache, 64 << 20)
            self._flush_buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE,
                                           size=self._flush_bytes)
        # In-order queue: done before the next launch; its own event is never timed.
        cl.enqueue_fill_buffer(self.queue, self._flush_buffer, np.float32(0), 0,
                               self._flush_bytes)
