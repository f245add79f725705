"""Tile shapes chosen by problem size, from the kernel's spec (`size_rules`).

A tile shape tuned for 4096 leaves most of a GPU idle at 1000: with 128x128 tiles a
1000x1030 C is 72 work-groups. A spec may say which values to use instead, and where; the
first rule whose `when` (an expression over M, N, K and `backend`, the backend's name, e.g.
`backend == 'opencl'`: compilers differ in what fits in registers) holds sets its values,
unless the user or the sweep gave one of them on the command line: a hand-picked tile shape is
then taken as given, whole (a rule's values only fit together). A rule may also set the register
cap (`max_registers`, null for none) that suits its tile, unless the command line sets
`kernel.max_registers`: ptxas allocates and schedules a kernel differently under a cap, even
one it would not reach, and which way is faster depends on the tile.
"""

from typing import Optional

from omegaconf import OmegaConf

from runner.config.expressions import ExpressionError, evaluate
from runner.errors import RunError

PARAM_PREFIX = "kernel.params."
CAP_KEY = "kernel.max_registers"
CAP = "max_registers"  # in the pinned set when the command line sets the cap (no parameter has
                       # a lower-case name)


def pinned_params(task_overrides) -> set[str]:
    """Parameters given as `kernel.params.NAME=value` overrides (the command line, a sweep),
    and `max_registers` when `kernel.max_registers=...` is one of them."""
    pinned = set()
    for override in task_overrides or ():
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key.startswith(PARAM_PREFIX):
            pinned.add(key[len(PARAM_PREFIX):])
        elif key == CAP_KEY:
            pinned.add(CAP)
    return pinned


def apply_size_rules(cfg, pinned: set[str]) -> Optional[str]:
    """Set the first matching rule's values in `cfg.kernel.params`, unless one of them is in
    `pinned`; returns what was applied, in words, or None when no rule was applied."""
    names = {"M": cfg.m, "N": cfg.n, "K": cfg.k, "backend": cfg.backend.name}
    for rule in cfg.kernel.get("size_rules") or ():
        try:
            holds = evaluate(rule.when, names)
        except ExpressionError as error:
            raise RunError(f"{cfg.kernel.name}: bad size rule {rule.when!r}: {error}") from None
        if not holds:
            continue
        if pinned & set(rule.params):
            return None  # the command line sets the tile shape
        changed = {name: value for name, value in rule.params.items()
                   if cfg.kernel.params.get(name) != value}
        for name, value in changed.items():
            cfg.kernel.params[name] = value
        shown = [f"{name}={value}" for name, value in changed.items()]
        if (CAP in rule and not OmegaConf.is_missing(rule, CAP) and CAP not in pinned
                and cfg.kernel.get(CAP) != rule.max_registers):
            cfg.kernel.max_registers = rule.max_registers
            shown.append(f"{CAP}={rule.max_registers}")
        shown = " ".join(shown) or "nothing"
        return f"{rule.when}: {shown} ({rule.reason})"
    return None
