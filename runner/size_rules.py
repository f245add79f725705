"""Tile shapes chosen by problem size, from the kernel's spec (`size_rules`).

A tile shape tuned for 4096 leaves most of a GPU idle at 1000: with 128x128 tiles a
1000x1030 C is 72 work-groups. A spec may say which values to use instead, and where; the
first rule whose `when` (an expression over M, N, K and `backend`, the backend's name, e.g.
`backend == 'opencl'`: compilers differ in what fits in registers) holds sets its values,
unless the user or the sweep gave one of them on the command line: a hand-picked tile shape is
then taken as given, whole (a rule's values only fit together).
"""

from typing import Optional

from runner.errors import RunError
from runner.expressions import ExpressionError, evaluate

PARAM_PREFIX = "kernel.params."


def pinned_params(task_overrides) -> set[str]:
    """Parameters given as `kernel.params.NAME=value` overrides (the command line, a sweep)."""
    pinned = set()
    for override in task_overrides or ():
        key = str(override).split("=", 1)[0].lstrip("+~")
        if key.startswith(PARAM_PREFIX):
            pinned.add(key[len(PARAM_PREFIX):])
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
        shown = " ".join(f"{name}={value}" for name, value in changed.items()) or "nothing"
        return f"{rule.when}: {shown} ({rule.reason})"
    return None
