"""docs/examples/upstream: YAMLs for kernel files of other repositories, which are not in this
repository (the README there says how to fetch them; the GPU runs are in its table). Here, what
can be checked without them: each YAML composes, plans at the size its table was measured at,
and names its files, its main launch and its scalars as the README says."""

from pathlib import Path

import pytest
from conftest import compose_config

from runner.config.spec import ProblemSize, plan_kernel

UPSTREAM = Path(__file__).resolve().parent.parent / "docs" / "examples" / "upstream"
NAMES = sorted(path.stem for path in (UPSTREAM / "conf" / "kernel").glob("*.yaml"))


def plan(name: str, size: ProblemSize):
    cfg = compose_config(f"hydra.searchpath=[file://{UPSTREAM / 'conf'}]", f"kernel={name}")
    return cfg, plan_kernel(cfg.kernel, size)


@pytest.mark.parametrize("name", NAMES)
def test_each_upstream_yaml_plans_at_4096(name):
    cfg, planned = plan(name, ProblemSize(4096, 4096, 4096))
    assert planned.name == name
    (source,) = [value for value in cfg.kernel.sources.values() if value]
    assert source in (UPSTREAM / "README.md").read_text(), f"{source} is not in the README"
    assert all(len(line) <= 160 for line in (UPSTREAM / "conf" / "kernel" / f"{name}.yaml")
               .read_text().splitlines())


def test_mygemm_10_takes_any_size_and_its_own_kernel_is_the_main_launch():
    _, planned = plan("mygemm_10", ProblemSize(1000, 1030, 999))
    assert [launch.entry for launch in planned.launches] == [
        "transpose", "paddingAddZeroes", "paddingAddZeroes", "myGEMM10", "paddingRemoveZeroes"]
    assert planned.main_launch.entry == "myGEMM10"
    assert planned.include_first == {"opencl": ("settings.h",)}
    # the padded copies, as myGEMM's clGEMM.cpp sizes them (its M is our N)
    assert planned.scratch["CXL"] == 1152 * 1024 and planned.scratch["BXL"] == 1152 * 1008


def test_the_practice_kernel_carries_alpha_and_beta():
    _, zero = plan("sgemm_practice_7", ProblemSize(256, 256, 256))
    _, scaled = plan("sgemm_practice_7_beta", ProblemSize(256, 256, 256))
    assert (zero.blas_alpha, zero.blas_beta) == (1.0, 0.0)
    assert (scaled.blas_alpha, scaled.blas_beta) == (1.5, -0.5)
    assert scaled.main_launch.entry == "mysgemm_v7<128, 128, 8, 8, 8>"
