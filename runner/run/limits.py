"""Checks of a plan against what the device allows: each failure is one line naming both sides."""

from typing import Mapping, Optional

from runner.backends.base import DeviceInfo, KernelResources
from runner.config.spec import KernelPlan
from runner.errors import Refused


def _gb(nbytes: int) -> str:
    return f"{nbytes / 1e9:.2f} GB"


def check_device_support(plan: KernelPlan, device: DeviceInfo) -> None:
    """A step written for NVIDIA's tensor cores (inline PTX) on a device that has them."""
    needed = plan.requires_compute_capability
    if needed is None:
        return
    wanted = f"an NVIDIA GPU of compute capability {needed // 10}.{needed % 10} or later"
    if not device.is_nvidia_gpu or device.compute_capability is None:
        where = ("backend=cuda" if plan.requires_exact_architecture
                 else "backend=cuda or backend=opencl backend.platform=NVIDIA")
        raise Refused(f"{plan.name} needs {wanted} (its source is NVIDIA inline PTX for the "
                       f"tensor cores), not {device.name} ({device.platform}); run it with {where}")
    major, minor = (int(part) for part in device.compute_capability.split("."))
    if major * 10 + minor < needed:
        raise Refused(f"{plan.name} needs {wanted}; {device.name} is "
                       f"{device.compute_capability}")
    if plan.requires_exact_architecture and major * 10 + minor != needed:
        raise Refused(f"{plan.name} needs compute capability {needed // 10}.{needed % 10} "
                       f"exactly (its inline PTX uses instructions only that architecture "
                       f"has, such as wgmma on sm_90a); {device.name} is "
                       f"{device.compute_capability}")


def check_launch_limits(plan: KernelPlan, device: DeviceInfo) -> None:
    """Work-group shape against the device's limits, before anything is compiled."""
    for launch in plan.launches:
        shape = "x".join(str(v) for v in launch.local)
        if launch.work_group_size > device.max_work_group_size:
            raise Refused(f"{plan.name}: work-group {shape} = {launch.work_group_size} "
                           f"work-items exceeds the {device.max_work_group_size} that "
                           f"{device.name} allows")
        for dim, (extent, limit) in enumerate(zip(launch.local, device.max_work_item_sizes)):
            if extent > limit:
                raise Refused(f"{plan.name}: work-group {shape} is {extent} in dimension {dim}, "
                               f"over the {limit} that {device.name} allows there")
        allowed = device.dynamic_local_memory_bytes or device.local_memory_bytes
        if launch.local_bytes > allowed:
            raise Refused(f"{plan.name}: {launch.entry} asks for {launch.local_bytes} bytes of "
                           f"dynamic local/shared memory per work-group, over the {allowed} "
                           f"that {device.name} allows")


def check_memory(plan: KernelPlan, device: DeviceInfo, buffer_floats: Mapping[str, int]) -> None:
    """All buffers of the run (inputs, output, scratch, baseline) against the device memory."""
    sizes = {name: count * 4 for name, count in buffer_floats.items()}
    total = sum(sizes.values())
    shown = ", ".join(f"{name} {_gb(n)}" for name, n in sizes.items())
    if total > device.global_memory_bytes:
        raise Refused(f"{plan.name} at {plan.size.label(plan.operation)} needs {_gb(total)} of "
                       f"device memory ({shown}) but {device.name} has "
                       f"{_gb(device.global_memory_bytes)}")
    for name, nbytes in sizes.items():
        if nbytes > device.max_alloc_bytes:
            raise Refused(f"{plan.name}: buffer {name} needs {_gb(nbytes)} but {device.name} "
                           f"allocates at most {_gb(device.max_alloc_bytes)} in one buffer")


def available_host_bytes() -> Optional[int]:
    """MemAvailable of /proc/meminfo (Linux), None where the host does not say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_host_memory(plan: KernelPlan, problem_floats: Mapping[str, int]) -> None:
    """The inputs and the output as float32 on the host, against the memory it has free: the
    least the run needs there (the reference needs more), so that a size too large is refused
    rather than ending in the kernel's out-of-memory killer."""
    needed = sum(problem_floats.values()) * 4
    available = available_host_bytes()
    if available is not None and needed > available:
        raise Refused(f"{plan.name} at {plan.size.label(plan.operation)} needs {_gb(needed)} of "
                      f"host memory for its inputs and output but {_gb(available)} is free")


def check_kernel_limits(plan: KernelPlan, device: DeviceInfo,
                        resources: Mapping[str, KernelResources]) -> None:
    """What the compiled kernel needs (local memory) against the device."""
    for launch in plan.launches:
        used = resources.get(launch.entry)
        if used is None:
            continue
        if used.local_memory_bytes is not None and \
                used.local_memory_bytes > device.local_memory_bytes:
            raise Refused(f"{plan.name}: {launch.entry} uses {used.local_memory_bytes} bytes of "
                           f"local/shared memory per work-group, over the "
                           f"{device.local_memory_bytes} that {device.name} allows")
        # The per-kernel work-group limit is left to the driver: NVIDIA's OpenCL reports 256
        # for kernels that launch fine with 1024. A launch it refuses ends the run with a clear
        # line from the backend, and verification catches anything else.
