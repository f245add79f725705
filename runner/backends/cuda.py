"""CUDA through CuPy: NVRTC compiles, the driver loads the cubin, CUDA events time."""

import ctypes
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from runner.backends import driver_env
from runner.backends.base import (POISON_BITS, Backend, CompiledProgram, DeviceInfo,
                                  KernelResources, pci_address)
from runner.backends.nvrtc import compile_cuda, ptx_signatures
from runner.backends.ptxas import parse_ptxas_report
from runner.errors import RunError

driver_env.prepare()  # CUDA_CACHE_DISABLE before CuPy first initialises the driver

# cuBLAS must do plain FP32 arithmetic for the baseline: CuPy uses TF32 only when this is "1".
os.environ["CUPY_TF32"] = "0"


# The runner's own device work, compiled once per process from plain C (no header: NVRTC takes
# about 0.1 s where each of CuPy's templated elementwise and reduction kernels took 0.7-0.8 s,
# paid in a job's check on a host whose CuPy kernel cache is empty). CuPy keeps the cubin in
# that cache too.
#
# gemmlab_hold_queue: events time what the GPU does between them, idle time included. Recorded
# on an idle GPU, the start event fires at once and the kernel starts only when the host has
# launched it, some microseconds later: 10% of a 50 µs transpose. A short kernel that spins
# first keeps the queue busy while the start event and the launches are enqueued, so the start
# event fires right before the first launch begins (NVBench's blocking kernel, with a timer
# instead of a flag).
_HELPERS_SOURCE = r"""
extern "C" __global__ void gemmlab_hold_queue(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}

extern "C" __global__ void gemmlab_fill_words(unsigned int *words, unsigned int value,
                                              unsigned long long count) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < count; i += (unsigned long long)gridDim.x * blockDim.x)
        words[i] = value;
}

extern "C" __global__ void gemmlab_count_differences(const unsigned int *first,
                                                     const unsigned int *second,
                                                     unsigned long long count,
                                                     unsigned long long *differences) {
    unsigned int mine = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < count; i += (unsigned long long)gridDim.x * blockDim.x)
        mine += first[i] != second[i];
    for (int offset = 16; offset > 0; offset /= 2)
        mine += __shfl_down_sync(0xffffffffu, mine, offset);
    if ((threadIdx.x & 31) == 0 && mine)
        atomicAdd(differences, (unsigned long long)mine);
}
"""
HOLD_NS = 200_000  # far longer than enqueueing an event and a few launches from Python
_HELPER_BLOCK = 256
_HELPER_BLOCKS = 1024  # grid-stride: enough blocks to fill any GPU, any count
_helpers: dict[int, Any] = {}


def _helper(cupy, name: str):
    """One of _HELPERS_SOURCE's kernels, its module compiled once per device and process."""
    device = cupy.cuda.Device().id
    if device not in _helpers:
        _helpers[device] = cupy.RawModule(code=_HELPERS_SOURCE)
    return _helpers[device].get_function(name)


def hold_queue(cupy) -> None:
    """Enqueue the spin kernel on the current device's current stream (before a start event)."""
    _helper(cupy, "gemmlab_hold_queue")((1,), (1,), (np.uint64(HOLD_NS),))


def fill_words(cupy, buffer, bits: int) -> None:
    """Every 32-bit word of a contiguous float32 array set to `bits`, on the current stream."""
    blocks = min(_HELPER_BLOCKS, max(1, -(-buffer.size // _HELPER_BLOCK)))
    _helper(cupy, "gemmlab_fill_words")((blocks,), (_HELPER_BLOCK,),
                                        (buffer, np.uint32(bits), np.uint64(buffer.size)))


def count_differences(cupy, first, second, count: int) -> int:
    """How many of the first `count` 32-bit words of two arrays differ, counted on the GPU."""
    differences = cupy.zeros(1, dtype=cupy.uint64)  # a memset: nothing compiled
    blocks = min(_HELPER_BLOCKS, max(1, -(-count // _HELPER_BLOCK)))
    _helper(cupy, "gemmlab_count_differences")((blocks,), (_HELPER_BLOCK,),
                                               (first, second, np.uint64(count), differences))
    return int(differences.get()[0])


def cuda_pci_address(props: dict) -> str:
    return pci_address(int(props.get("pciDomainID", 0)), int(props["pciBusID"]),
                       int(props.get("pciDeviceID", 0)))


def _attribute_khz(runtime, device_id: int, props: dict, name: str, attribute: int) -> float:
    """A clock (kHz) from the device's properties, or its attribute where a newer CUDA has
    dropped it from the properties (CUDA 13: clockRate, memoryClockRate); 0 where unknown."""
    value = props.get(name)
    if not value:
        try:
            value = runtime.deviceGetAttribute(attribute, device_id)
        except Exception:  # not in this CUDA either: unknown
            value = 0
    return float(value or 0)


def _memory_gbps(runtime, device_id: int, props: dict) -> Optional[float]:
    """DRAM bandwidth from the memory clock (kHz, double data rate) and the bus width (bits)."""
    clock_khz = _attribute_khz(runtime, device_id, props, "memoryClockRate", 36)
    width = props.get("memoryBusWidth") or 0
    return clock_khz * 1e3 * 2 * width / 8 / 1e9 or None


def cuda_uuid(props: dict) -> Optional[str]:
    """CUDA's device UUID as NVML names it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")."""
    raw = props.get("uuid")
    if not raw or len(raw) != 16:
        return None
    text = bytes(raw).hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


CUDA_EXTRA = "pip install 'gemmlab[cuda]'"


def require_cupy() -> None:
    """A RunError saying what to install where CuPy or NVIDIA's NVRTC is missing."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        raise RunError(f"backend=cuda needs CuPy, which is not installed: {CUDA_EXTRA} "
                       "(CuPy and NVIDIA's NVRTC; on a GPU host with CUDA 13, cupy-cuda13x)"
                       ) from None
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: F401
        nvrtc.getVersion()
    except Exception as error:
        raise RunError(f"backend=cuda needs NVIDIA's NVRTC, which CuPy cannot load "
                       f"({type(error).__name__}: {str(error).strip()[:120]}): {CUDA_EXTRA}"
                       ) from None


def gpu_count() -> int:
    """Number of CUDA GPUs CuPy can see (0 when CuPy or the driver is missing)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver, no device: all mean "none here"
        return 0


def _driver_version(cuda_driver: int, cuda_runtime: int) -> str:
    text = (f"CUDA {cuda_driver // 1000}.{cuda_driver % 1000 // 10} driver API, "
            f"runtime {cuda_runtime // 1000}.{cuda_runtime % 1000 // 10}")
    try:  # the NVIDIA driver's own version number, when NVML is installed
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        version = version.decode() if isinstance(version, bytes) else version
        return f"NVIDIA {version} ({text})"
    except Exception:
        return text


# cuTensorMapEncodeTiled's enums (CUDA driver API, cuda.h), for float32 tiles.
_TENSOR_MAP_FLOAT32 = 7             # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
_TENSOR_MAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CU_TENSOR_MAP_SWIZZLE_*
_TENSOR_MAP_L2_PROMOTION_128B = 2   # CU_TENSOR_MAP_L2_PROMOTION_L2_128B
TENSOR_MAP_BYTES = 128              # sizeof(CUtensorMap), 64-byte aligned
# A CUtensorMap as a NumPy structured scalar: CuPy passes its 128 bytes by value to the kernel's
# `const __grid_constant__` struct parameter (the driver places it at the parameter's alignment).
TENSOR_MAP_DTYPE = np.dtype([("opaque", np.uint64, (TENSOR_MAP_BYTES // 8,))], align=True)


_driver_functions: dict[str, Any] = {}


def _driver_function(name: str, argtypes: list, needed_for: str):
    """A CUDA driver entry point that CuPy does not wrap, through ctypes, looked up once; a
    RunError saying what needs it where the driver has none."""
    function = _driver_functions.get(name)
    if function is None:
        try:
            function = getattr(ctypes.CDLL("libcuda.so.1"), name)
        except (OSError, AttributeError) as error:
            raise RunError(f"the CUDA driver has no {name} ({error}): {needed_for}") from None
        function.argtypes = argtypes
        function.restype = ctypes.c_int
        _driver_functions[name] = function
    return function


def _encode_tiled():
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    return _driver_function(
        "cuTensorMapEncodeTiled",
        [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, ctypes.POINTER(u64),
         ctypes.POINTER(u64), ctypes.POINTER(u32), ctypes.POINTER(u32), ctypes.c_int,
         ctypes.c_int, ctypes.c_int, ctypes.c_int],
        "TMA tensor maps need CUDA 12 and a Hopper-generation driver")


def encode_tensor_map(address: int, rows: int, cols: int, ld: int, box_rows: int,
                      box_cols: int, swizzle: int) -> np.void:
    """A 2-D float32 CUtensorMap over the `rows` x `cols` matrix at `address` (rows `ld` floats
    apart), copied in `box_rows` x `box_cols` boxes; elements outside the matrix read as zeros."""
    if address % 16:
        raise RunError(f"a TMA tensor map needs a 16-byte aligned address; the buffer is at "
                       f"{address:#x}")
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    raw = (ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))()
    dims = (u64 * 2)(cols, rows)            # innermost (contiguous) dimension first
    strides = (u64 * 1)(ld * 4)             # bytes from row to row
    box = (u32 * 2)(box_cols, box_rows)
    element_strides = (u32 * 2)(1, 1)
    result = _encode_tiled()(raw, _TENSOR_MAP_FLOAT32, 2, ctypes.c_void_p(address), dims,
                             strides, box, element_strides, 0, _TENSOR_MAP_SWIZZLE[swizzle],
                             _TENSOR_MAP_L2_PROMOTION_128B, 0)
    if result != 0:
        raise RunError(f"cuTensorMapEncodeTiled refused a {rows}x{cols} tensor map (ld {ld}, "
                       f"box {box_rows}x{box_cols}, swizzle {swizzle}): CUresult {result}")
    return np.frombuffer(bytes(raw), dtype=TENSOR_MAP_DTYPE)[0]


_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("value", ctypes.c_uint64 * 8)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_bytes", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attributes", ctypes.POINTER(_LaunchAttribute)),
                ("attribute_count", ctypes.c_uint)]


def _launch_kernel_ex():
    return _driver_function(
        "cuLaunchKernelEx",
        [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
         ctypes.c_void_p],
        "overlapping launches need CUDA 12")


def _kernel_parameter(value):
    """A ctypes object holding one kernel argument as the kernel takes it."""
    if isinstance(value, np.void):  # a tensor map, passed by value
        return (ctypes.c_uint8 * value.nbytes).from_buffer_copy(value.tobytes())
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    if isinstance(value, np.float32):
        return ctypes.c_float(float(value))
    return ctypes.c_void_p(int(value.data.ptr))  # a device array


def launch_overlapping(kernel, grid, block, args, shared_bytes: int, stream_ptr: int) -> None:
    """Launch `kernel` as a programmatic dependent of the launch before it on the stream: it
    may start as soon as that one's blocks have all run `griddepcontrol.launch_dependents`,
    and waits for its results where it runs `griddepcontrol.wait` (sm_90+)."""
    function = _launch_kernel_ex()
    attribute = _LaunchAttribute(_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value[0] = 1  # programmaticStreamSerializationAllowed
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                           shared_bytes, ctypes.c_void_p(stream_ptr),
                           ctypes.pointer(attribute), 1)
    held = [_kernel_parameter(value) for value in args]
    pointers = (ctypes.c_void_p * max(1, len(held)))(
        *[ctypes.cast(ctypes.pointer(value), ctypes.c_void_p) for value in held])
    result = function(ctypes.byref(config), ctypes.c_void_p(int(kernel.ptr)), pointers, None)
    if result != 0:
        raise RunError(f"cuLaunchKernelEx refused an overlapping launch: CUresult {result}")


class CUDABackend(Backend):
    name = "cuda"
    tensor_maps = True
    # Without the small inputs' copies in the pool, matmul_9 at 1000x1030x999 timed 26% slower
    # in 20-job sweeps on an H100 (2 of 3 run again, with the timed windows), at full speed with
    # them; why is not known (docs/methodology.md, "the pool's history").
    compares_small_inputs = True

    def __init__(self, device: int = 0, compile_only_cc: int = 90, require_gpu: bool = True,
                 use_gpu: bool = True):
        """use_gpu=False: compile only (NVRTC for compile_only_cc), even where a GPU exists, so
        that what is checked without a GPU is checked the same way with one; it needs none."""
        require_cupy()
        self.has_gpu = use_gpu and gpu_count() > 0
        if not self.has_gpu and require_gpu and use_gpu:
            raise RunError("backend=cuda needs an NVIDIA GPU that CuPy can use; none was found "
                           "(backend=opencl runs on the CPU)")
        self.device_id = device
        if self.has_gpu:
            import cupy

            if not 0 <= device < gpu_count():
                raise RunError(f"backend.device={device}: CUDA sees {gpu_count()} GPU(s)")
            self._cupy = cupy
            self._device = cupy.cuda.Device(device)
            self._device.use()
            self._info = self._read_device_info()
            major, minor = self._info.compute_capability.split(".")
            self.compute_capability = int(major) * 10 + int(minor)
        else:
            self._info = None
            self.compute_capability = compile_only_cc

    def _read_device_info(self) -> DeviceInfo:
        runtime = self._cupy.cuda.runtime
        props = runtime.getDeviceProperties(self.device_id)
        driver = runtime.driverGetVersion()
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return DeviceInfo(
            name=name,
            vendor="NVIDIA",
            platform="CUDA",
            driver=_driver_version(driver, runtime.runtimeGetVersion()),
            device_type="gpu",
            global_memory_bytes=int(props["totalGlobalMem"]),
            max_alloc_bytes=int(props["totalGlobalMem"]),
            local_memory_bytes=int(props["sharedMemPerBlock"]),
            dynamic_local_memory_bytes=int(props.get("sharedMemPerBlockOptin",
                                                     props["sharedMemPerBlock"])),
            max_work_group_size=int(props["maxThreadsPerBlock"]),
            max_work_item_sizes=tuple(int(v) for v in props["maxThreadsDim"]),
            compute_units=int(props["multiProcessorCount"]),
            compute_capability=f"{props['major']}.{props['minor']}",
            pci_bus_id=int(props["pciBusID"]),
            pci_address=cuda_pci_address(props),
            uuid=cuda_uuid(props),
            max_clock_mhz=_attribute_khz(runtime, self.device_id, props, "clockRate", 13) / 1e3
            or None,
            cache_bytes=int(props.get("l2CacheSize", 0)) or None,
            memory_gbps=_memory_gbps(runtime, self.device_id, props),
        )

    def device_info(self) -> DeviceInfo:
        if self._info is None:
            raise RunError("backend=cuda: no GPU, so no device information")
        return self._info

    def compile(self, source: str, source_name: str, entries: Sequence[str],
                defines: Mapping[str, int], max_registers: Optional[int] = None,
                include_dirs: Sequence[str] = ()) -> CompiledProgram:
        output = compile_cuda(source, source_name, defines, self.compute_capability,
                              max_registers, include_dirs, name_expressions=entries)
        reported = parse_ptxas_report(output.log)
        declared = ptx_signatures(output.ptx)
        symbol = {entry: output.lowered.get(entry, entry) for entry in entries}  # in the cubin
        signatures = {entry: declared.get(symbol[entry]) for entry in entries}
        kernels, resources = {}, {}
        module = None
        if self.has_gpu:
            module = self._cupy.cuda.function.Module()
            module.load(output.cubin)
        for entry in entries:
            if module is None:
                if symbol[entry] not in reported:
                    raise RunError(f"{source_name} has no kernel named {entry} "
                                   "(is it a __global__ function?)")
                kernels[entry] = None
                resources[entry] = reported[symbol[entry]]
                continue
            try:
                function = module.get_function(symbol[entry])
            except Exception:  # CuPy raises its driver error for an unknown name
                raise RunError(f"{source_name} has no kernel named {entry} "
                               "(is it a __global__ function?)") from None
            kernels[entry] = function
            resources[entry] = self._function_resources(
                function, reported.get(symbol[entry], KernelResources()))
        return CompiledProgram(kernels, output.log, output.options, resources, keepalive=module,
                               signatures=signatures, symbols=symbol)

    def _function_resources(self, function, reported: KernelResources) -> KernelResources:
        from cupy_backends.cuda.api import driver

        def attribute(which):
            return int(driver.funcGetAttribute(which, function.ptr))

        return KernelResources(
            registers=attribute(driver.CU_FUNC_ATTRIBUTE_NUM_REGS),
            spill_store_bytes=reported.spill_store_bytes,
            spill_load_bytes=reported.spill_load_bytes,
            stack_bytes=reported.stack_bytes,
            local_memory_bytes=attribute(driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            private_memory_bytes=attribute(driver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            max_work_group_size=attribute(driver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        )

    def alloc(self, count: int):
        return self._cupy.empty(max(1, count), dtype=self._cupy.float32)

    def upload(self, host: np.ndarray):
        return self._cupy.asarray(np.ascontiguousarray(host, dtype=np.float32).ravel())

    def filled(self, count: int, bits: int):
        buffer = self.alloc(count)
        fill_words(self._cupy, buffer, bits)
        return buffer

    def write(self, buffer, offset: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host, dtype=np.float32).ravel()
        buffer[offset:offset + host.size].set(host)

    def view(self, buffer, offset: int, count: int):
        return buffer[offset:offset + count]

    def download(self, buffer, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape))
        return self._cupy.asnumpy(buffer[:count]).reshape(shape)

    def download_range(self, buffer, offset: int, count: int) -> np.ndarray:
        return self._cupy.asnumpy(buffer[offset:offset + count])

    def count_differences(self, first, second, count: int) -> int:
        return count_differences(self._cupy, first, second, count)

    def poison(self, buffer) -> None:
        fill_words(self._cupy, buffer, POISON_BITS)

    def tensor_map(self, buffer, rows: int, cols: int, ld: int, box_rows: int, box_cols: int,
                   swizzle: int) -> np.void:
        return encode_tensor_map(int(buffer.data.ptr), rows, cols, ld, box_rows, box_cols,
                                 swizzle)

    def launch(self, kernel, groups: Sequence[int], local: Sequence[int],
               args: Sequence[Any], local_bytes: int = 0,
               overlap_previous: bool = False) -> None:
        grid = tuple(groups) + (1,) * (3 - len(groups))
        block = tuple(local) + (1,) * (3 - len(local))
        kernel_args = tuple(np.int32(a) if isinstance(a, int) else a for a in args)
        try:
            if local_bytes > 48 * 1024:
                self._allow_dynamic_shared(kernel, local_bytes)
            if overlap_previous and self.compute_capability >= 90:
                launch_overlapping(kernel, grid, block, kernel_args, local_bytes,
                                   self._cupy.cuda.get_current_stream().ptr)
            else:
                kernel(grid, block, kernel_args, shared_mem=local_bytes)
        except self._cupy.cuda.driver.CUDADriverError as error:
            shape = "x".join(str(v) for v in local)
            raise RunError(f"CUDA refused to launch a {shape} block: {error}") from None
        return None

    def _allow_dynamic_shared(self, kernel, nbytes: int) -> None:
        """Past 48 KiB, a kernel's dynamic shared memory must be allowed per function first."""
        allowed = getattr(self, "_dynamic_shared_allowed", {})
        self._dynamic_shared_allowed = allowed
        if allowed.get(kernel.ptr, 0) < nbytes:
            from cupy_backends.cuda.api import driver

            driver.funcSetAttribute(
                kernel.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
            allowed[kernel.ptr] = nbytes

    def device_copy(self, dst, src, nbytes: int) -> None:
        dst.data.copy_from_device_async(src.data, nbytes)
        return None

    def time_ms(self, enqueue: Callable[[], Sequence[Any]]) -> float:
        start, end = self._cupy.cuda.Event(), self._cupy.cuda.Event()
        hold_queue(self._cupy)
        start.record()
        enqueue()
        end.record()
        end.synchronize()
        return self._cupy.cuda.get_elapsed_time(start, end)

    def synchronize(self) -> None:
        self._cupy.cuda.runtime.deviceSynchronize()

    def flush_cache(self) -> None:
        if not self.has_gpu:
            return
        if getattr(self, "_flush_buffer", None) is None:
            l2 = self._cupy.cuda.runtime.getDeviceProperties(self.device_id)["l2CacheSize"]
            self._flush_buffer = self._cupy.empty(max(2 * l2, 64 << 20) // 4, dtype=np.float32)
        self._flush_buffer.fill(0)  # on the stream the next launch and its events use
