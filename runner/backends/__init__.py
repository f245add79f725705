"""Backends, imported lazily: the OpenCL path never imports CuPy and the CUDA path never pyopencl."""

import json

from runner.backends.base import Backend, CompiledProgram, DeviceInfo, KernelResources

BACKEND_NAMES = ("opencl", "cuda")


_made: dict[str, Backend] = {}


def make_backend(backend_cfg) -> Backend:
    """The backend a composed `backend:` config asks for, made once per process: the jobs of a
    sweep run in one process share its device context, compiled programs and baselines."""
    from omegaconf import OmegaConf

    key = json.dumps(OmegaConf.to_container(backend_cfg, resolve=True, enum_to_str=True)
                     if OmegaConf.is_config(backend_cfg) else vars(backend_cfg),
                     sort_keys=True, default=str)
    if key not in _made:
        _made[key] = _new_backend(backend_cfg)
    return _made[key]


def check_device_type(backend_cfg) -> None:
    """Refused, before anything is recorded, where an OpenCL run asks for a kind of device
    (backend.device_type=gpu or accelerator) that no platform has: the line names the devices
    there are. The CPU and `auto` are left to the job, whose choice builds a probe kernel."""
    if backend_cfg.name != "opencl":
        return
    device_type = getattr(backend_cfg.device_type, "value", backend_cfg.device_type)
    if device_type in ("gpu", "accelerator"):
        from runner.backends.opencl import select_device

        select_device(backend_cfg.platform, backend_cfg.device, device_type)


def _new_backend(backend_cfg) -> Backend:
    if backend_cfg.name == "opencl":
        from runner.backends.opencl import OpenCLBackend

        device_type = getattr(backend_cfg.device_type, "value", backend_cfg.device_type)
        return OpenCLBackend(backend_cfg.platform, backend_cfg.device, device_type)
    if backend_cfg.name == "cuda":
        from runner.backends.cuda import CUDABackend

        return CUDABackend(backend_cfg.device, backend_cfg.compile_only_cc)
    raise ValueError(f"unknown backend {backend_cfg.name!r} (known: {', '.join(BACKEND_NAMES)})")


__all__ = ["Backend", "CompiledProgram", "DeviceInfo", "KernelResources", "make_backend",
           "check_device_type", "BACKEND_NAMES"]
