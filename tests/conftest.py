"""Shared fixtures: composing configs as the CLI does, the CPU's OpenCL device, GPU markers."""

import itertools
import os
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra_plugins.gemmlab_launcher import register as register_launchers

from runner.backends import driver_env
from runner.config.paths import CONF_DIR
from runner.config.schema import register_configs

# Tests import pyopencl themselves (test_timing, …): the drivers' environment first, as the
# OpenCL backend does (the ICD loader reads its vendors once per process).
driver_env.prepare()
register_configs()
register_launchers()
# NVRTC's outputs cached on disk (runner/backends/nvrtc.py): the tests' own, never the user's,
# so a test's compile is a compile; CLI runs the tests start inherit it.
os.environ.setdefault("GEMMLAB_COMPILE_CACHE", tempfile.mkdtemp(prefix="gemmlab-test-nvrtc-"))

def _step_order(name: str) -> tuple:
    family, _, number = name.rpartition("_")
    return family, int(number) if number.isdigit() else 0


KERNEL_NAMES = sorted((p.stem for p in (CONF_DIR / "kernel").glob("*.yaml")), key=_step_order)
SGEMM_KERNELS = [n for n in KERNEL_NAMES if n.startswith("matmul_")]
MOVE_KERNELS = [n for n in KERNEL_NAMES if not n.startswith("matmul_")]


def compose_config(*overrides: str, with_hydra: bool = False):
    """The config `python -m runner <overrides>` would run with (and Hydra's own node)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides),
                       return_hydra_config=with_hydra)


def kernel_yaml(name: str) -> dict:
    return yaml.safe_load(Path(CONF_DIR / "kernel" / f"{name}.yaml").read_text())


# Steps written in NVIDIA inline PTX (tensor cores): refused on the CPU, run on the GPU only.
NVIDIA_ONLY_KERNELS = [n for n in KERNEL_NAMES if kernel_yaml(n).get("requires_compute_capability")]
PORTABLE_KERNELS = [n for n in KERNEL_NAMES if n not in NVIDIA_ONLY_KERNELS]
PORTABLE_SGEMM_KERNELS = [n for n in SGEMM_KERNELS if n not in NVIDIA_ONLY_KERNELS]


def _rule_overrides(rule: dict) -> list[str]:
    """A size rule's values as overrides: its parameters, and its register cap if it sets one
    (a cap changes what ptxas builds even where it does not bind)."""
    overrides = [f"kernel.params.{k}={v}" for k, v in rule["params"].items()]
    if "max_registers" in rule:
        cap = rule["max_registers"]
        overrides.append(f"kernel.max_registers={'null' if cap is None else cap}")
    return overrides


# Every size rule a CUDA run can take (kernel, index in its size_rules; OpenCL-only rules left
# out) and the overrides it sets: the programs runs compile besides the defaults.
CUDA_SIZE_RULES = {(name, index): _rule_overrides(rule)
                   for name in KERNEL_NAMES
                   for index, rule in enumerate(kernel_yaml(name).get("size_rules") or [])
                   if "backend == 'opencl'" not in rule["when"]}


def _holds(rule: str, names: dict) -> bool:
    from runner.config.expressions import ArithmeticFailure, evaluate

    try:
        return bool(evaluate(rule, names))
    except ArithmeticFailure:
        return False


def variant_params(name: str, limit: int = 6) -> list[dict]:
    """The defaults, then each parameter moved to each other allowed value (constraints hold)."""
    spec = kernel_yaml(name)
    defaults = dict(spec["params"])
    variants = [defaults]
    for param, values in spec["allowed"].items():
        for value in values:
            candidate = {**defaults, param: value}
            if candidate in variants:
                continue
            names = {**candidate, "M": 64, "N": 64, "K": 64}
            if all(_holds(c["rule"], names) for c in spec.get("constraints", [])):
                variants.append(candidate)
    # Spread the picks over the list rather than taking only the first parameter's values.
    if len(variants) > limit:
        step = (len(variants) - 1) / (limit - 1)
        variants = [variants[round(i * step)] for i in range(limit)]
    return variants


def constrained_param_combinations(name: str):
    """Every combination of the allowed values of the parameters the constraints name; the
    others stay at their defaults, since no constraint's truth can depend on them (matmul_9:
    GROUP, PAD_B and K_UNROLL, a 32nd of its million combinations)."""
    spec = kernel_yaml(name)
    rules = " ".join(c["rule"] for c in spec.get("constraints", []))
    named = set(re.findall(r"[A-Za-z_]\w*", rules))
    keys = [k for k in spec["allowed"] if k in named]
    for values in itertools.product(*(spec["allowed"][k] for k in keys)):
        yield {**spec["params"], **dict(zip(keys, values))}


@pytest.fixture(scope="session")
def cpu_backend():
    """The CPU through OpenCL, what CI has: PoCL, or Intel's CPU runtime where PoCL's LLVM
    does not know the CPU (the runner's own choice for backend.device_type=cpu)."""
    from runner.backends.opencl import OpenCLBackend

    return OpenCLBackend(device_type="cpu")


def _cuda_gpu() -> bool:
    from runner.backends.cuda import gpu_count

    return gpu_count() > 0


def _nvidia_opencl() -> bool:
    try:
        import pyopencl as cl

        return any("nvidia" in p.name.lower() for p in cl.get_platforms())
    except Exception:
        return False


requires_cuda_gpu = pytest.mark.skipif(not _cuda_gpu(), reason="needs an NVIDIA GPU for CuPy")
without_cuda_gpu = pytest.mark.skipif(_cuda_gpu(), reason="checks what happens without a GPU")
requires_nvidia_opencl = pytest.mark.skipif(not _nvidia_opencl(),
                                            reason="needs NVIDIA's OpenCL platform")
