"""An Optuna sampler for Hydra's Optuna sweeper that draws only configurations the kernel's spec
accepts, and each one once.

A tile-shape search space is mostly invalid: of matmul_9's 324 points 234 break a constraint
(warps must tile the block, the ring must fit shared memory, ...). Drawn independently, 70 of
80 trials were refused before anything ran, and TPE learnt nothing from them. The constraints
are known before anything runs, so, as Kernel Tuner does, this sampler enumerates the space,
keeps the points `plan_kernel` accepts at the problem size (size rules included), and searches
over those: TPE (multivariate, over the whole configuration) proposes a point; a valid point
not yet measured is taken as it is, any other is moved to the nearest valid point not yet
measured (each parameter's distance is its step along its ordered choices). The first
`n_startup_trials` are drawn at random from the valid points. Once every valid point has been
measured the sampler says so and draws measured points again (their runs are reused, `cached`).

Selected with `override /hydra/sweeper/sampler: valid_space` (conf/search/*.yaml); the config
(`runner.config.schema.ValidSpaceSamplerConfig`) hands it the composed kernel, the problem and
the searched parameters, `hydra.sweeper.params` and the command line's sweeps, as the sweeper
itself reads them.
"""

import itertools
import logging
import warnings
from types import SimpleNamespace
from typing import Any, Mapping, Optional

import numpy as np
import optuna
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides
from omegaconf import OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    IntUniformDistribution,
)
from optuna.trial import FrozenTrial

from runner.config.size_rules import PARAM_PREFIX, apply_size_rules, pinned_params
from runner.config.spec import ProblemSize, check_constraints, check_params, plan_kernel
from runner.errors import Refused, RunError

log = logging.getLogger("runner")

MAX_POINTS = 1_000_000  # points planned one by one (about 0.2 ms each) before the search starts

Point = tuple  # one value per searched parameter, in the order of `ValidSpace.names`


def _choices(name: str, distribution: BaseDistribution) -> list:
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, IntUniformDistribution):
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    raise RunError(f"valid-space search: {name} must be a list of values, choice(...) or an "
                   f"integer range(...), not {type(distribution).__name__}")


class ValidSpace:
    """The searched parameters' values, and the points of their product the spec accepts."""

    def __init__(self, distributions: Mapping[str, BaseDistribution], kernel, problem: Mapping):
        self.names = list(distributions)
        self.choices = [_choices(name, distributions[name]) for name in self.names]
        total = int(np.prod([len(values) for values in self.choices]))
        if total > MAX_POINTS:
            raise RunError(f"valid-space search: {total:,} points is more than the "
                           f"{MAX_POINTS:,} it enumerates; search fewer values")
        self.total = total
        self.problem = ProblemSize(problem["M"], problem["N"], problem["K"])
        # One config, changed per point and restored: a copy per point costs 20 ms.
        self._cfg = OmegaConf.create({"kernel": kernel, "m": problem["M"], "n": problem["N"],
                                      "k": problem["K"], "backend": {"name": problem["backend"]}})
        self._quick_check = self._quick_check_inputs(kernel)
        self.valid: list[Point] = []
        self.first_refusal: Optional[str] = None
        for point in itertools.product(*self.choices):
            reason = self.refusal(point)
            if reason is None:
                self.valid.append(point)
            elif self.first_refusal is None:
                self.first_refusal = reason
        if not self.valid:
            raise RunError(f"valid-space search: none of the {total} points passes "
                           f"{kernel.name}'s spec at {problem['M']}x{problem['N']}x"
                           f"{problem['K']} (the first: {self.first_refusal})")

    def _quick_check_inputs(self, kernel):
        """Plain-data inputs for checking a point's values and constraints before the full plan
        (most points fail there; OmegaConf makes the full plan ~10 ms a point), or None when a
        searched key is not a tiling parameter. A size rule's `when` reads only M, N, K and the
        backend, so the parameters the rules leave are the same for every point."""
        if not all(name.startswith(PARAM_PREFIX) for name in self.names):
            return None
        probe = OmegaConf.create(self._cfg)
        apply_size_rules(probe, pinned_params(f"{name}=" for name in self.names))
        constraints = [SimpleNamespace(rule=c.rule, reason=c.reason)
                       for c in kernel.get("constraints") or ()]
        return (dict(probe.kernel.params), OmegaConf.to_container(kernel.allowed), constraints)

    def refusal(self, point: Point) -> Optional[str]:
        """Why the run would refuse `point` before compiling anything, or None."""
        if self._quick_check is not None:  # the full plan's first checks, on plain data
            params, allowed, constraints = self._quick_check
            params = {**params, **{name[len(PARAM_PREFIX):]: value
                                   for name, value in zip(self.names, point)}}
            name = self._cfg.kernel.name
            try:
                check_params(name, params, allowed)
                check_constraints(name, constraints, {**params, **self.problem.as_names()})
            except Refused as refused:
                return str(refused)
        cfg = self._cfg
        kept = {name: OmegaConf.select(cfg, name) for name in self.names}
        kept_params = OmegaConf.to_container(cfg.kernel.params)
        kept_cap = cfg.kernel.get("max_registers")
        for name, value in zip(self.names, point):
            OmegaConf.update(cfg, name, value, force_add=True)
        try:
            apply_size_rules(cfg, pinned_params(f"{name}=" for name in self.names))
            plan_kernel(cfg.kernel, self.problem)
        except Refused as refused:
            return str(refused)
        finally:  # size rules may have changed other parameters and the register cap
            cfg.kernel.params = kept_params
            cfg.kernel.max_registers = kept_cap
            for name, value in kept.items():
                OmegaConf.update(cfg, name, value, force_add=True)
        return None

    def index(self, point: Point) -> tuple:
        return tuple(values.index(value) for values, value in zip(self.choices, point))

    def nearest(self, proposal: Point, among: list[Point], rng: np.random.RandomState) -> Point:
        """The point of `among` closest to `proposal` (ties drawn at random): each parameter
        counts its steps along its choices, scaled to 0..1, so no long list dominates."""
        spans = np.array([max(len(values) - 1, 1) for values in self.choices], dtype=float)
        wanted = np.array(self.index(proposal), dtype=float)
        distances = np.array([np.abs(np.array(self.index(point)) - wanted) / spans
                              for point in among]).sum(axis=1)
        closest = np.flatnonzero(np.isclose(distances, distances.min()))
        return among[int(rng.choice(closest))]


class ValidSpaceSampler(optuna.samplers.BaseSampler):
    def __init__(self, kernel, problem: Mapping[str, Any], space: Optional[Mapping[str, str]],
                 overrides: Optional[list] = None, seed: Optional[int] = None,
                 n_startup_trials: int = 10):
        # The search space as the sweeper builds it: hydra.sweeper.params, then the command
        # line's overrides (a sweep there, `kernel.params.BK=8,16`, is searched too).
        arguments = [f"{name}={value}" for name, value in (space or {}).items()]
        distributions, fixed = create_params_from_overrides(arguments + list(overrides or ()))
        for name in fixed:  # `kernel.params.TS=4` on the command line: not searched
            distributions.pop(name, None)
        if not distributions:
            raise RunError("valid-space search: no searched parameter (hydra.sweeper.params "
                           "is empty)")
        self._distributions = distributions
        self._space = ValidSpace(distributions, kernel, problem)
        self._rng = np.random.RandomState(seed)
        with warnings.catch_warnings():  # multivariate TPE is marked experimental in optuna 2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._tpe = optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                   n_startup_trials=n_startup_trials)
        self._drawn: set[Point] = set()
        self._exhausted_said = False
        space_ = self._space
        log.info("valid-space search over %s: %d of %d points pass %s's spec at %sx%sx%s "
                 "(%d refused before anything runs)", ", ".join(space_.names), len(space_.valid),
                 space_.total, kernel.name, problem["M"], problem["N"], problem["K"],
                 space_.total - len(space_.valid))

    @property
    def valid_points(self) -> list[Point]:
        return list(self._space.valid)

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        space = self._space
        for earlier in study.get_trials(deepcopy=False):
            if all(name in earlier.params for name in space.names):
                self._drawn.add(tuple(earlier.params[name] for name in space.names))
        fresh = [point for point in space.valid if point not in self._drawn]
        if not fresh:
            if not self._exhausted_said:
                log.info("valid-space search: all %d valid points have been drawn; further "
                         "trials repeat them", len(space.valid))
                self._exhausted_said = True
            fresh = list(space.valid)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            proposal = self._tpe.sample_relative(study, trial, search_space)
        if proposal:
            wanted = tuple(proposal[name] for name in space.names)
            point = wanted if wanted in fresh else space.nearest(wanted, fresh, self._rng)
        else:  # the first trials: at random among the valid points
            point = fresh[self._rng.randint(len(fresh))]
        self._drawn.add(point)
        return dict(zip(space.names, point))

    def sample_independent(self, study, trial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        raise RunError(f"valid-space search: {param_name} is not in the searched space the "
                       "sampler was given; put it under hydra.sweeper.params")

    def after_trial(self, study, trial: FrozenTrial, state, values) -> None:
        self._tpe.after_trial(study, trial, state, values)
