"""Composition: defaults, size overrides, and Hydra's own errors for typos and wrong types."""

import pytest
from conftest import KERNEL_NAMES, compose_config
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigKeyError, ValidationError


def test_defaults_compose_to_opencl_matmul_2_at_1024():
    cfg = compose_config()
    assert cfg.backend.name == "opencl"
    assert cfg.kernel.name == "matmul_2"
    assert (cfg.m, cfg.n, cfg.k) == (1024, 1024, 1024)
    assert cfg.tracking.uri == "sqlite:///mlflow.db"


def test_size_sets_all_three_and_m_n_k_override_one_each():
    cfg = compose_config("size=512", "n=2048")
    assert (cfg.m, cfg.n, cfg.k) == (512, 2048, 512)


def test_tiling_parameter_override_reaches_the_kernel_params():
    cfg = compose_config("kernel.params.TS=16")
    assert cfg.kernel.params.TS == 16


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_every_kernel_config_composes_with_both_backends(name):
    for backend in ("opencl", "cuda"):
        cfg = compose_config(f"kernel={name}", f"backend={backend}")
        assert cfg.kernel.name == name
        assert cfg.backend.name == backend


def test_unknown_kernel_names_the_group_options():
    with pytest.raises(MissingConfigException, match="matmul_99"):
        compose_config("kernel=matmul_99")


def test_unknown_backend_fails_at_composition():
    with pytest.raises(MissingConfigException, match="vulkan"):
        compose_config("backend=vulkan")


def test_non_integer_tile_value_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ValidationError)) as info:
        compose_config("kernel.params.TS=big")
    assert "TS" in str(info.value) or "TS" in str(info.value.__cause__)


def test_typo_in_a_key_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_config("timing.repeat=3")


def test_wrong_type_for_a_size_fails_at_composition():
    with pytest.raises((ConfigCompositionException, ValidationError)):
        compose_config("size=lots")
