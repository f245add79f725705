"""Backends, imported lazily: the OpenCL path never imports CuPy and the CUDA path never pyopencl."""

from runner.backends.base import Backend, CompiledProgram, DeviceInfo, KernelResources

BACKEND_NAMES = ("opencl", "cuda")


def make_backend(backend_cfg) -> Backend:
    """The backend a composed `backend:` config asks for."""
    if backend_cfg.name == "opencl":
        from runner.backends.opencl import OpenCLBackend

        device_type = getattr(backend_cfg.device_type, "value", backend_cfg.device_type)
        return OpenCLBackend(backend_cfg.platform, backend_cfg.device, device_type)
    if backend_cfg.name == "cuda":
        from runner.backends.cuda import CUDABackend

        return CUDABackend(backend_cfg.device, backend_cfg.compile_only_cc)
    raise ValueError(f"unknown backend {backend_cfg.name!r} (known: {', '.join(BACKEND_NAMES)})")


__all__ = ["Backend", "CompiledProgram", "DeviceInfo", "KernelResources", "make_backend",
           "BACKEND_NAMES"]
