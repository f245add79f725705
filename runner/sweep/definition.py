"""What a sweep is, read from Hydra's config before any job starts: the overrides the sweeper
expands (`sweep_definition`), the parent run's name (`sweep_name`), how many jobs it will launch
(`expected_jobs`) and whether its batches can use the compile pool (`compiles_ahead`)."""

from typing import Optional

from omegaconf import DictConfig, OmegaConf

from runner.record import names


def _sweep_overrides(config: DictConfig) -> list:
    """The overrides the sweeper expands, in its order and as it keys them (Hydra's
    BasicSweeper.split_arguments): the sweeper's params, then the command line's overrides; a
    later override replaces an earlier one only under the same key, prefix included, so
    `shape=square_1024` replaces an experiment's `shape` list and `~shape` does not (each job
    then takes a shape from the list and deletes it: the list's length in identical jobs)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    texts = [f"{key}={value}" for key, value in params.items()]
    texts += override_texts(config)
    final = {}
    for override in OverridesParser.create().parse_overrides(texts):
        final[override.get_key_element()] = override
    return list(final.values())


def override_texts(config: DictConfig) -> list:
    """The command line's overrides as typed: `size='${oops}'` stays text (read as a node, an
    interpolation in it would be resolved, and fail before anything is recorded)."""
    return [str(text) for text in
            OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]


def sweep_definition(config: DictConfig) -> dict[str, str]:
    """What is swept, as `key -> values`: the sweeper's params (an experiment's, or the Optuna
    search space) with the command line's overrides on top, as the sweeper combines them."""
    definition = {}
    for override in _sweep_overrides(config):
        if override.is_sweep_override():
            key, _, values = override.input_line.partition("=")
            definition[key.lstrip("+~")] = values
    return definition


def sweep_name(config: DictConfig, definition: dict[str, str]) -> str:
    """The parent run's name: the kernel when one is fixed, then what was swept (the runs table
    shows the first 20 characters), then the backend when one is fixed, e.g. `matmul_14
    shape=square_1024,… · cuda sweep`. The experiment is already the page's own, and
    kernel.params.TS reads as TS."""
    swept = " ".join(f"{k.removeprefix(names.KERNEL_PARAMS_PREFIX)}={v}"
                     for k, v in definition.items())
    kernel = None if "kernel" in definition else OmegaConf.select(config, "kernel.name")
    backend = None if "backend" in definition else OmegaConf.select(config, "backend.name")
    head = " ".join(part for part in (kernel, swept) if part) or "one job"
    return f"{head} · {backend + ' ' if backend else ''}sweep"[:240]


def expected_jobs(config: DictConfig) -> Optional[int]:
    """How many jobs the sweep will launch, when it can be told in advance."""
    trials = OmegaConf.select(config, "hydra.sweeper.n_trials")
    if trials is not None:  # the Optuna sweeper
        return int(trials)
    try:
        total = 1
        for override in _sweep_overrides(config):
            if override.is_sweep_override():
                total *= len(list(override.sweep_string_iterator()))
        return total
    except Exception:  # a sweep the basic parser cannot expand (e.g. an interval)
        return None


def compiles_ahead(config: DictConfig) -> bool:
    """Whether a batch of this sweep can have programs for the compile pool: more than one job
    (or a count not known in advance), and an Optuna sweeper asking for more than one trial at
    a time (a batch's first program is compiled by its worker)."""
    expected = expected_jobs(config)
    at_a_time = OmegaConf.select(config, "hydra.sweeper.n_jobs")
    return (expected is None or expected > 1) and (at_a_time is None or int(at_a_time) > 1)
