"""Config files parsed once per process for a multirun's compositions
(runner/sweep/compose_cache.py): every composition equals Hydra's own, whatever came before."""

import pytest
from conftest import KERNEL_NAMES, compose_config
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from runner.sweep import compose_cache

# Every kernel, the backends taking turns (OpenCL composes the CUDA-only steps: it refuses them
# when run), then shapes and sizes, parameter overrides, searches and experiments with defaults of
# their own.
OVERRIDE_SETS = (
    [[f"backend={('cuda', 'opencl')[index % 2]}", f"kernel={kernel}"]
     for index, kernel in enumerate(KERNEL_NAMES)]
    + [
        ["backend=opencl", "kernel=matmul_9"],
        ["backend=cuda", "kernel=matmul_9", "shape=square_4096"],
        ["backend=cuda", "kernel=matmul_14", "shape=4097x4095x4093"],
        ["backend=opencl", "kernel=matmul_2", "shape=1000x1030x999"],
        ["kernel=transpose_3", "shape=8191x8193"],
        ["backend.device_type=cpu", "kernel=matmul_3", "size=48", "timing.repeats=3"],
        ["kernel=matmul_9", "kernel.params.BM=64", "kernel.params.TM=8", "m=1000", "k=512"],
        ["kernel=matmul_4", "kernel.params.TS=32", "tracking.inspect=false"],
        ["+search=matmul_9", "backend=cuda", "size=4096"],
        ["+search=matmul_3", "backend=opencl"],
        ["+experiment=sgemm_ladder", "backend=cuda", "kernel=matmul_11"],
        ["+experiment=transpose_ladder_cpu"],
        ["+experiment=seed_prefetch_tiling", "backend=cuda"],
        ["+experiment=seed_cuda_learning_transpose", "backend=opencl"],
        ["hydra.job.chdir=true", "kernel=copy_2"],
    ]
)


def _composed(overrides) -> dict:
    return OmegaConf.to_container(compose_config(*overrides, with_hydra=True), resolve=False)


@pytest.fixture(scope="module")
def hydras_own():
    """Each override set composed by Hydra alone."""
    compose_cache.uninstall()
    return [_composed(overrides) for overrides in OVERRIDE_SETS]


@pytest.fixture
def cache():
    """The cache installed, and taken out after: its kept configs must not reach other tests."""
    compose_cache.uninstall()
    compose_cache.install()
    yield
    compose_cache.uninstall()


def test_every_composition_with_the_cache_is_hydras_own_in_any_order(hydras_own, cache,
                                                                      monkeypatch):
    parses = []
    parse = compose_cache._load_uncached
    monkeypatch.setattr(compose_cache, "_load_uncached",
                        lambda file_: parses.append(file_) or parse(file_))
    order = list(range(len(OVERRIDE_SETS)))
    for index in order[::-1]:
        assert _composed(OVERRIDE_SETS[index]) == hydras_own[index], OVERRIDE_SETS[index]
    parsed_once = len(parses)
    assert parsed_once  # the first compositions parsed the files ...
    for index in order + order[::2]:
        assert _composed(OVERRIDE_SETS[index]) == hydras_own[index], OVERRIDE_SETS[index]
    assert len(parses) == parsed_once  # ... and the ones after them got what was kept


def test_changing_a_composed_config_changes_no_later_one(hydras_own, cache):
    for index, overrides in enumerate(OVERRIDE_SETS):
        cfg = compose_config(*overrides, with_hydra=True)
        with open_dict(cfg):
            cfg.kernel.name = "changed"
            cfg.kernel.params.clear()
            cfg.kernel.sources.cuda = "changed.cu"
            cfg.hydra.job.name = "changed"
            cfg.hydra.run.dir = "changed"
            cfg.hydra.overrides.task.append("changed=1")
            cfg.timing.repeats = -1
            del cfg["check"]
        assert _composed(overrides) == hydras_own[index], overrides


def test_each_load_is_an_object_of_its_own(tmp_path, cache):
    path = tmp_path / "c.yaml"
    path.write_text("a: {b: [1, 2]}\ndefaults: [x]\n")
    with open(path, encoding="utf-8") as f:
        first = OmegaConf.load(f)
    first.a.b.append(3)
    first.pop("defaults")
    with open(path, encoding="utf-8") as f:
        second = OmegaConf.load(f)
    assert first is not second
    assert OmegaConf.to_container(second) == {"a": {"b": [1, 2]}, "defaults": ["x"]}


def _write_config_dir(root, size: int, kernel_name: str) -> None:
    (root / "kernel").mkdir(exist_ok=True)
    (root / "config.yaml").write_text(f"defaults:\n  - kernel: one\n  - _self_\nsize: {size}\n")
    (root / "kernel" / "one.yaml").write_text(f"name: {kernel_name}\n")


def test_an_edited_file_is_read_again(tmp_path, cache):
    def composed():
        with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
            return OmegaConf.to_container(compose(config_name="config"))

    _write_config_dir(tmp_path, 1024, "aaa")
    assert composed() == {"kernel": {"name": "aaa"}, "size": 1024}
    # the same lengths, written at once: a cache keyed on the size or a coarse mtime keeps
    # the old config
    _write_config_dir(tmp_path, 2048, "bbb")
    assert composed() == {"kernel": {"name": "bbb"}, "size": 2048}


def test_a_yaml_error_still_names_the_file(tmp_path, cache):
    path = tmp_path / "broken.yaml"
    path.write_text("a: [1, 2\n")
    with open(path, encoding="utf-8") as f, pytest.raises(Exception, match="broken.yaml"):
        OmegaConf.load(f)


def test_the_launcher_installs_it():
    from types import SimpleNamespace

    from hydra_plugins.gemmlab_launcher.gemmlab_launcher import GemmlabLauncher

    compose_cache.uninstall()
    loader = SimpleNamespace(load_sweep_config=lambda master_config, sweep_overrides: None)
    try:
        GemmlabLauncher().setup(hydra_context=SimpleNamespace(config_loader=loader),
                                task_function=None, config=OmegaConf.create())
        assert compose_cache.installed()
    finally:
        compose_cache.uninstall()
