"""The two sources of a step agree with each other and with their YAML."""

import re

import pytest
from conftest import KERNEL_NAMES, kernel_yaml

from runner.config.paths import CONF_DIR, KERNELS_DIR

DEFAULT = re.compile(r"#ifndef (\w+)\s*\n\s*#define \1\s+(\d+)")


@pytest.mark.parametrize("backend", ["opencl", "cuda"])
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_source_defaults_match_the_yaml_and_entries_exist(name, backend):
    spec = kernel_yaml(name)
    assert spec["name"] == name
    if backend not in spec["sources"]:
        pytest.skip(f"{name} has no {backend} source (test_every_step_has_both_backends...)")
    source = (KERNELS_DIR / backend / spec["sources"][backend]).read_text()
    defaults = {macro: int(value) for macro, value in DEFAULT.findall(source)}
    assert defaults == spec["params"], "each parameter is a macro whose default equals the YAML's"
    for launch in spec["launches"]:
        assert re.search(rf"\b{launch['entry']}\s*\(", source), launch["entry"]
    assert source.lstrip().startswith("//"), "a header comment says what the step changes and why"


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_step_has_both_backends_and_says_how_it_handles_edges(name):
    spec = kernel_yaml(name)
    if spec.get("requires_exact_architecture"):
        # One architecture's own instructions (matmul_12: wgmma on sm_90a), which only CUDA can
        # ask for: the one source, and the YAML says why.
        assert spec["sources"] == {"cuda": f"{name}.cu"}
        assert "OpenCL" in (CONF_DIR / "kernel" / f"{name}.yaml").read_text()
    else:
        assert spec["sources"] == {"opencl": f"{name}.cl", "cuda": f"{name}.cu"}
    assert spec["edges"].strip()
    for value_list in spec["allowed"].values():
        assert value_list == sorted(set(value_list))
    for param, value in spec["params"].items():
        assert value in spec["allowed"][param]
