"""The one interface both backends fill the same way.

compile(source, entries, defines, include_dirs) -> CompiledProgram; alloc / upload / view / download /
poison; tensor_map(buffer, ...) -> a launch argument (CUDA only: `tensor_maps` says whether a
backend makes them);
launch(kernel, groups, local, args) -> event; time_ms(enqueue) with device events;
kernel_resources(program, entry); device_info(). Values a driver cannot give are None, never 0.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from runner.errors import RunError


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    vendor: str
    platform: str  # OpenCL platform, or "CUDA"
    driver: str
    device_type: str  # "gpu", "cpu", "accelerator"; "simulator" for Oclgrind
    global_memory_bytes: int
    max_alloc_bytes: int  # largest single buffer
    local_memory_bytes: int  # local/shared memory one work-group may use
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    compute_units: int
    compute_capability: Optional[str] = None  # CUDA only, e.g. "9.0"
    pci_bus_id: Optional[int] = None
    # The GPU's full PCI address as NVML writes it ("00000000:65:00.0"): the same GPU seen from
    # OpenCL, CUDA (the cuBLAS baseline) and NVML (its clocks and power). None elsewhere.
    pci_address: Optional[str] = None
    uuid: Optional[str] = None  # CUDA's "GPU-…" UUID, where known
    # Largest dynamic local/shared memory a launch may ask for (CUDA: the opt-in limit above
    # the 48 KiB of static shared memory); None: local_memory_bytes.
    dynamic_local_memory_bytes: Optional[int] = None
    # What the device's ceiling is worked out from (runner/run/peak.py); None where unknown.
    max_clock_mhz: Optional[float] = None  # the driver's highest core/SM clock
    cache_bytes: Optional[int] = None  # the last-level cache the driver reports (a GPU's L2)
    float_vector_width: Optional[int] = None  # OpenCL: the widest native/preferred float vector
    memory_gbps: Optional[float] = None  # DRAM bandwidth from the driver's memory clock and bus

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.device_type == "gpu" and "nvidia" in (self.vendor + self.platform).lower()


def pci_address(domain: int, bus: int, device: int) -> str:
    """A GPU's PCI address as NVML and nvidia-smi write it."""
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


# What outputs and scratch hold before a checked launch: finite (a BLAS kernel that reads C and
# multiplies it by beta = 0 gets 0, where NaN would give NaN), far from any value a kernel
# computes from inputs in [-1, 1) (|C| <= K), and its bits are recognised as never written.
POISON_BITS = 0xC61C3FF6  # -9999.99 as a float32
POISON = np.uint32(POISON_BITS).view(np.float32)


@dataclass(frozen=True)
class KernelResources:
    registers: Optional[int] = None  # per work-item
    spill_store_bytes: Optional[int] = None
    spill_load_bytes: Optional[int] = None
    stack_bytes: Optional[int] = None
    local_memory_bytes: Optional[int] = None  # static local/shared memory per work-group
    private_memory_bytes: Optional[int] = None  # per work-item (OpenCL), local memory (CUDA)
    max_work_group_size: Optional[int] = None  # for this kernel on this device

    @property
    def spill_bytes(self) -> Optional[int]:
        if self.spill_store_bytes is None or self.spill_load_bytes is None:
            return None
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass
class CompiledProgram:
    kernels: Mapping[str, Any]  # entry name -> backend kernel handle (None: compile-only)
    log: str  # everything the compiler said
    options: list[str]  # the exact compiler options
    resources: Mapping[str, KernelResources] = field(default_factory=dict)
    keepalive: Any = None  # what must outlive the kernel handles (a CUDA module)
    # entry -> the kind of each parameter in order: "int" (32-bit), "float" (32-bit),
    # "pointer", "local" (an OpenCL __local pointer) or "other <type>"; an entry missing (or
    # None) where the compiler cannot tell, and the launch's arguments then go unchecked.
    signatures: Mapping[str, Optional[tuple[str, ...]]] = field(default_factory=dict)
    # entry -> the function's name in the binary where it differs (CUDA: a C++ entry's mangled
    # name, which NVRTC resolved; nobody writes it by hand)
    symbols: Mapping[str, str] = field(default_factory=dict)


class Backend(ABC):
    name: str
    # Whether tensor_map() works here: TMA tensor maps exist on CUDA (sm_90 and later) only, and
    # a plan that passes one is refused on any other backend before a compile.
    tensor_maps: bool = False
    # Whether the input check compares an input smaller than guards.DEVICE_COMPARE_MIN_FLOATS
    # on the device too, with a copy made at its upload, rather than downloading it whole.
    compares_small_inputs: bool = False

    @abstractmethod
    def device_info(self) -> DeviceInfo: ...

    @abstractmethod
    def compile(self, source: str, source_name: str, entries: Sequence[str],
                defines: Mapping[str, int], max_registers: Optional[int] = None,
                include_dirs: Sequence[str] = ()) -> CompiledProgram:
        """Build `source` with `-DNAME=value` per define; `max_registers` caps registers per
        work-item (NVRTC --maxrregcount, NVIDIA OpenCL -cl-nv-maxrregcount; others ignore it).
        `include_dirs`: the source's own folder first, for the files beside it that it
        includes (-I); a host header is refused in one line (runner/backends/includes.py).
        `entries` are what the launches name: a C name, or in CUDA any C++ name (namespaced,
        a template instantiation) that NVRTC resolves; `kernels` is keyed by them."""

    @abstractmethod
    def alloc(self, count: int) -> Any:
        """A device buffer of `count` float32 values."""

    @abstractmethod
    def upload(self, host: np.ndarray) -> Any: ...

    @abstractmethod
    def filled(self, count: int, bits: int) -> Any:
        """A device buffer of `count` 32-bit words, each set to `bits` on the device (a guard's
        sentinel: nothing made on the host, nothing copied)."""

    @abstractmethod
    def write(self, buffer: Any, offset: int, host: np.ndarray) -> None:
        """`host`'s floats copied into `buffer` from float `offset` on."""

    @abstractmethod
    def view(self, buffer: Any, offset: int, count: int) -> Any:
        """`count` floats of `buffer` from float `offset` on, as a buffer a kernel can take
        (offsets are multiples of 64 KiB: runner/run/guards.py)."""

    @abstractmethod
    def download(self, buffer: Any, shape: tuple[int, ...]) -> np.ndarray: ...

    @abstractmethod
    def download_range(self, buffer: Any, offset: int, count: int) -> np.ndarray:
        """`count` floats of `buffer` from float `offset` on (any offset), on the host."""

    @abstractmethod
    def count_differences(self, first: Any, second: Any, count: int) -> int:
        """How many of the first `count` 32-bit words of two buffers differ, counted on the
        device (as bits: a NaN equals itself), so that neither is copied to the host."""

    def tensor_map(self, buffer: Any, rows: int, cols: int, ld: int, box_rows: int,
                   box_cols: int, swizzle: int) -> Any:
        """A TMA tensor map over `buffer` (a view from `view`, or an allocation) as a launch
        argument: `rows` x `cols` float32s, `ld` floats from row to row (a multiple of 4), boxes
        of `box_rows` x `box_cols`, shared-memory swizzle 0, 32, 64 or 128 bytes; elements
        outside rows x cols read as zeros. The kernel takes it as a 128-byte `const
        __grid_constant__` struct. Only where `tensor_maps` is true."""
        raise RunError(f"backend={self.name} cannot make TMA tensor maps (CUDA only)")

    @abstractmethod
    def poison(self, buffer: Any) -> None:
        """Fill with POISON (every 32-bit word), so that an element the kernel never writes cannot
        pass the check, while beta * C with beta = 0 stays 0 as BLAS allows."""

    @abstractmethod
    def launch(self, kernel: Any, groups: Sequence[int], local: Sequence[int],
               args: Sequence[Any], local_bytes: int = 0,
               overlap_previous: bool = False) -> Any:
        """Enqueue one launch; ints in `args` go as 32-bit ints. `local_bytes` of dynamic
        local memory: CUDA's `extern __shared__` array, OpenCL's trailing `__local` pointer
        argument (none when 0). `overlap_previous`: it may start while the launch before it
        finishes, where the backend can do so (CUDA on sm_90+). Returns the launch's event."""

    @abstractmethod
    def device_copy(self, dst: Any, src: Any, nbytes: int) -> Any:
        """The device's own copy of `nbytes` (the bandwidth reference). Returns its event."""

    @abstractmethod
    def time_ms(self, enqueue: Callable[[], Sequence[Any]]) -> float:
        """Device-event time of everything `enqueue` puts on the queue (it returns the events)."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def flush_cache(self) -> None:
        """Evict the kernel's data from the device's last-level cache (L2 on a GPU) by writing a
        buffer twice its size, enqueued before the next launch and never inside a timed span:
        `timing.flush_l2=true` calls it before every sample, so each one starts cold."""
