"""The search presets' sampler: only configurations the spec accepts, each once, TPE-guided."""

import itertools

import optuna
import pytest
from conftest import _holds, compose_config, kernel_yaml
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

from runner.errors import RunError
from runner.sweep.valid_space import ValidSpace, ValidSpaceSampler

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _sampler(search: str, *overrides: str, sweeps=(), seed: int = 0) -> ValidSpaceSampler:
    """The sampler as `python -m runner -m +search=<search> <overrides> <sweeps>` builds it."""
    cfg = compose_config(f"+search={search}", *overrides, with_hydra=True)
    problem = {"M": cfg.m, "N": cfg.n, "K": cfg.k, "backend": cfg.backend.name}
    return ValidSpaceSampler(cfg.kernel, problem, cfg.hydra.sweeper.params,
                             [*overrides, *sweeps], seed=seed)


def _spec_accepts(kernel: str, point: dict, size: int) -> bool:
    """The constraints evaluated directly from the YAML, independently of the runner's planner."""
    spec = kernel_yaml(kernel)
    names = {**spec["params"], **point, "M": size, "N": size, "K": size}
    return (all(names[k] in spec["allowed"][k] for k in point)
            and all(_holds(c["rule"], names) for c in spec["constraints"]))


def _study(sampler: ValidSpaceSampler, objective, trials: int) -> list[dict]:
    """Drive the sampler as Hydra's Optuna sweeper does (ask, suggest every parameter with the
    sweeper's own distributions, tell); the configurations in the order they were drawn."""
    study = optuna.create_study(sampler=sampler, direction="maximize")
    distributions = sampler.infer_relative_search_space(study, None)
    drawn = []
    for _ in range(trials):
        trial = study.ask()
        point = {name: trial._suggest(name, dist) for name, dist in distributions.items()}
        drawn.append(point)
        study.tell(trial, objective(point))
    return drawn


def test_matmul_9s_space_keeps_exactly_the_points_its_constraints_accept():
    sampler = _sampler("matmul_9", "backend=cuda", "size=4096")
    searched = compose_config("+search=matmul_9", with_hydra=True).hydra.sweeper.params
    grid = [dict(zip(searched, values)) for values in itertools.product(
        *([int(v) for v in c.removeprefix("choice(").rstrip(")").split(",")]
          for c in searched.values()))]
    expected = {tuple(p.values()) for p in grid
                if _spec_accepts("matmul_9", {k.rsplit(".", 1)[-1]: v for k, v in p.items()},
                                 4096)}
    assert len(grid) == 324 and len(expected) == 90  # the grid sweep's 90 measured, 234 refused
    assert set(sampler.valid_points) == expected


def test_every_trial_draws_a_valid_point_never_one_twice_until_all_are_drawn():
    sampler = _sampler("matmul_3", "size=64")
    count = len(sampler.valid_points)
    drawn = _study(sampler, lambda p: float(p["kernel.params.TS"] * p["kernel.params.WPT"]),
                   count + 3)
    keys = [tuple(p.values()) for p in drawn]
    assert len(set(keys[:count])) == count  # each valid point once ...
    assert set(keys) == set(sampler.valid_points)  # ... then only repeats
    for point in drawn:
        assert _spec_accepts("matmul_3", {k.rsplit(".", 1)[-1]: v for k, v in point.items()}, 64)


def test_a_parameter_fixed_on_the_command_line_is_not_searched():
    sampler = _sampler("matmul_3", "size=64", "kernel.params.TS=4")
    assert {p for p in sampler.valid_points} == {(1,), (2,), (4,)}  # WPT must divide TS = 4


def test_tpe_guidance_finds_the_best_of_90_points_well_before_random_order_would():
    # A smooth objective over matmul_9's valid points with one best point. Drawn in random
    # order, the best of 90 is found within 40 trials with probability 40/90 per seed; the
    # guided search finds it within 40 for every one of five seeds.
    best = {"kernel.params.BM": 128, "kernel.params.BN": 256, "kernel.params.BK": 16,
            "kernel.params.TM": 16, "kernel.params.TN": 8, "kernel.params.STAGES": 2}

    def objective(point):
        return -sum(abs(point[k].bit_length() - best[k].bit_length()) for k in best)

    for seed in range(5):
        sampler = _sampler("matmul_9", "backend=cuda", "size=4096", seed=seed)
        assert tuple(best.values()) in sampler.valid_points
        drawn = _study(sampler, objective, 40)
        assert best in drawn, f"seed {seed}"


def test_a_proposal_outside_the_valid_points_moves_to_the_nearest():
    distributions, _ = create_params_from_overrides(["kernel.params.TS=choice(4, 8, 16, 32)",
                                                     "kernel.params.WPT=choice(1, 2, 4, 8)"])
    cfg = compose_config("kernel=matmul_3", "size=64")
    space = ValidSpace(distributions, cfg.kernel, {"M": 64, "N": 64, "K": 64,
                                                  "backend": "opencl"})
    import numpy as np

    rng = np.random.RandomState(0)
    assert (4, 8) not in space.valid  # WPT must divide TS
    assert space.nearest((4, 8), space.valid, rng) in {(4, 4), (8, 8)}  # one step either way
    assert space.nearest((32, 1), [p for p in space.valid if p != (32, 1)], rng) in \
        {(16, 1), (32, 2)}


def test_a_continuous_interval_and_an_empty_space_are_refused_in_one_line():
    with pytest.raises(RunError, match="TS must be a list of values"):
        _sampler("matmul_3", "size=64", sweeps=["kernel.params.TS=interval(1,4)"])
    with pytest.raises(RunError, match=r"none of the 1 points passes matmul_3's spec at "
                                       r"64x64x64 \(the first: .*TS % WPT == 0"):
        _sampler("matmul_3", "size=64",
                 sweeps=["kernel.params.TS=choice(4)", "kernel.params.WPT=choice(8)"])
