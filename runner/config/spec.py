"""From a composed kernel config and a problem size to a checked launch plan.

Everything a user can set is checked here, before anything is compiled: sizes, that every tiling
parameter is an integer among its allowed values, the kernel's own constraints (each failure
names the rule and its reason), and the launch geometry. Only values that pass reach a compiler
option string, as `-DNAME=value`.
"""

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from runner.config.expressions import ArithmeticFailure, ExpressionError, evaluate, evaluate_int
from runner.config.schema import Operation
from runner.errors import Refused, RunError

MACRO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
INT32_MAX = 2**31 - 1

# Buffers each operation provides to the kernels, by the names the launches' `args` use.
OPERATION_BUFFERS = {
    Operation.sgemm: ("A", "B", "C"),
    Operation.copy: ("src", "dst"),
    Operation.transpose: ("src", "dst"),
}


@dataclass(frozen=True)
class ProblemSize:
    M: int
    N: int
    K: int

    def as_names(self) -> dict[str, int]:
        return {"M": self.M, "N": self.N, "K": self.K}

    def label(self, operation: Operation) -> str:
        if operation is Operation.sgemm:
            return f"{self.M}x{self.N}x{self.K}"
        return f"{self.M}x{self.N}"


@dataclass(frozen=True)
class Launch:
    entry: str
    args: tuple[str, ...]
    local: tuple[int, ...]
    groups: tuple[int, ...]
    local_bytes: int = 0  # dynamic local/shared memory

    @property
    def work_group_size(self) -> int:
        size = 1
        for extent in self.local:
            size *= extent
        return size


@dataclass(frozen=True)
class KernelPlan:
    name: str
    operation: Operation
    params: Mapping[str, int]
    size: ProblemSize
    launches: tuple[Launch, ...]
    scratch: Mapping[str, int]  # buffer name -> float count
    flops: int
    min_bytes: int
    max_registers: Optional[int] = None
    precision: str = "fp32"
    requires_compute_capability: Optional[int] = None
    requires_exact_architecture: bool = False
    # The spec's `defines`, evaluated: fixed and derived macros beyond the parameters.
    extra_defines: Mapping[str, int] = field(default_factory=dict)

    @property
    def defines(self) -> dict[str, int]:
        """Every -DNAME=value the source is compiled with: the parameters, then the defines."""
        return {**self.params, **self.extra_defines}

    @property
    def entries(self) -> list[str]:
        return list(dict.fromkeys(launch.entry for launch in self.launches))

    @property
    def main_launch(self) -> Launch:
        """The launch the step is about: its function named as the step (a pre-pass may come
        before it, a pass that sums split-K slices after it), else the last one."""
        return next((launch for launch in self.launches if launch.entry == self.name),
                    self.launches[-1])

    def helper_launches(self) -> list[tuple[str, Launch]]:
        """The other launches, each with the side of the main one it runs on ("prepass" or
        "postpass"), each function once."""
        main = self.main_launch
        position = self.launches.index(main)
        seen, helpers = {main.entry}, []
        for index, launch in enumerate(self.launches):
            if launch.entry not in seen:
                seen.add(launch.entry)
                helpers.append(("prepass" if index < position else "postpass", launch))
        return helpers


def check_sizes(operation: Operation, size: ProblemSize) -> None:
    used = ("M", "N", "K") if operation is Operation.sgemm else ("M", "N")
    for name in used:
        value = getattr(size, name)
        if value < 1:
            raise Refused(f"{name}={value} is not a valid size: every size must be >= 1")
    pairs = [("M*K", size.M * size.K), ("K*N", size.K * size.N), ("M*N", size.M * size.N)]
    if operation is not Operation.sgemm:
        pairs = pairs[2:]
    for label, elements in pairs:
        if elements > INT32_MAX:
            raise Refused(f"{label}={elements} elements is too large: the kernels index "
                           f"with 32-bit ints (at most {INT32_MAX})")


def check_params(name: str, params: Mapping[str, int], allowed: Mapping[str, list]) -> None:
    for macro in params:
        if not MACRO_NAME.match(macro):
            raise Refused(f"{name}: parameter name {macro!r} is not an upper-case macro name")
        if macro not in allowed:
            raise Refused(f"{name}: parameter {macro} has no list of allowed values in its spec")
    for macro, values in allowed.items():
        if macro not in params:
            raise RunError(f"{name}: parameter {macro} has allowed values but no value")
        value = params[macro]
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused(f"{name}: {macro}={value!r} is not an integer")
        if value not in values:
            shown = ", ".join(str(v) for v in values)
            raise Refused(f"{name}: {macro}={value} is not an allowed value (allowed: {shown})")


def check_constraints(name: str, constraints, names: Mapping[str, int]) -> None:
    for constraint in constraints:
        try:
            holds = evaluate(constraint.rule, names)
        except ArithmeticFailure:
            holds = False  # e.g. a zero from integer division: the values do not fit the rule
        except ExpressionError as error:
            raise RunError(f"{name}: bad constraint: {error}") from None
        if not holds:
            shown = ", ".join(f"{k}={v}" for k, v in names.items())
            raise Refused(f"{name}: constraint `{constraint.rule}` fails ({shown}): "
                           f"{constraint.reason}")


def evaluate_defines(name: str, defines: Mapping[str, str],
                     params: Mapping[str, int]) -> dict[str, int]:
    """The spec's `defines` as integers, in order: each a fixed value or an expression over the
    parameters and the defines above it, checked to be an int32 before it reaches a compiler."""
    values: dict[str, int] = {}
    for macro, expression in defines.items():
        macro = str(macro)
        if not MACRO_NAME.match(macro):
            raise RunError(f"{name}: define name {macro!r} is not an upper-case macro name")
        if macro in params or macro in ("M", "N", "K"):
            raise RunError(f"{name}: define {macro} is also a parameter or a size; rename it")
        try:
            value = evaluate_int(expression, {**params, **values})
        except ArithmeticFailure as error:
            raise Refused(f"{name}: define {macro}: {error}") from None
        except ExpressionError as error:
            raise RunError(f"{name}: bad define {macro}: {error} (defines are integers: a "
                           "number, or an expression over the parameters and earlier "
                           "defines)") from None
        if not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise Refused(f"{name}: define {macro}={value} does not fit a 32-bit int")
        values[macro] = value
    return values


def _ints(name: str, what: str, expressions, names: Mapping[str, int]) -> tuple[int, ...]:
    try:
        values = tuple(evaluate_int(expression, names) for expression in expressions)
    except ExpressionError as error:
        raise RunError(f"{name}: bad {what}: {error}") from None
    if not 1 <= len(values) <= 3 or any(v < 1 for v in values):
        raise RunError(f"{name}: {what} {list(expressions)} gives {values}: "
                       "one to three dimensions, each >= 1")
    return values


def _launch_wanted(name: str, launch_cfg, names: Mapping[str, int]) -> bool:
    """A launch with a `when` runs only where it holds (e.g. a pre-pass some tiles skip)."""
    when = launch_cfg.get("when")
    if when is None:
        return True
    try:
        return bool(evaluate(when, names))
    except ExpressionError as error:
        raise RunError(f"{name}: bad `when` of launch {launch_cfg.entry}: {error}") from None


def plan_kernel(kernel_cfg, size: ProblemSize) -> KernelPlan:
    """Check a composed kernel config against `size` and work out its launches."""
    name = kernel_cfg.name
    operation = Operation(kernel_cfg.operation)
    check_sizes(operation, size)
    params = {str(k): v for k, v in kernel_cfg.params.items()}
    check_params(name, params, kernel_cfg.allowed)
    names = {**params, **size.as_names()}
    check_constraints(name, kernel_cfg.constraints, names)
    extra_defines = evaluate_defines(name, kernel_cfg.get("defines") or {}, params)
    names = {**params, **extra_defines, **size.as_names()}

    try:
        scratch = {buf: evaluate_int(expr, names) for buf, expr in kernel_cfg.scratch.items()}
        flops = evaluate_int(kernel_cfg.work.flops, names)
        min_bytes = evaluate_int(kernel_cfg.work.bytes, names)
    except ExpressionError as error:
        raise RunError(f"{name}: bad spec: {error}") from None

    known_args = set(size.as_names()) | set(OPERATION_BUFFERS[operation]) | set(scratch)
    launches = []
    for launch_cfg in kernel_cfg.launches:
        if not _launch_wanted(name, launch_cfg, names):
            continue
        unknown = [arg for arg in launch_cfg.args if arg not in known_args]
        if unknown:
            raise RunError(f"{name}: launch {launch_cfg.entry} names unknown arguments {unknown} "
                           f"(known: {sorted(known_args)})")
        local = _ints(name, "local size", launch_cfg.local, names)
        groups = _ints(name, "group count", launch_cfg.groups, names)
        if len(local) != len(groups):
            raise RunError(f"{name}: launch {launch_cfg.entry} has {len(local)} local dimensions "
                           f"but {len(groups)} group dimensions")
        try:
            local_bytes = evaluate_int(launch_cfg.get("local_bytes", "0"), names)
        except ExpressionError as error:
            raise RunError(f"{name}: bad local_bytes: {error}") from None
        if local_bytes < 0:
            raise RunError(f"{name}: launch {launch_cfg.entry} asks for {local_bytes} bytes of "
                           "local memory")
        launches.append(Launch(launch_cfg.entry, tuple(launch_cfg.args), local, groups,
                               local_bytes))
    if not launches:
        raise RunError(f"{name}: the spec lists no launches")
    max_registers = kernel_cfg.get("max_registers")
    if max_registers is not None and not 16 <= max_registers <= 255:
        raise Refused(f"{name}: max_registers={max_registers} must be within 16..255")
    precision = kernel_cfg.get("precision", "fp32")
    return KernelPlan(name, operation, params, size, tuple(launches), scratch, flops, min_bytes,
                      max_registers, getattr(precision, "value", precision),
                      kernel_cfg.get("requires_compute_capability"),
                      bool(kernel_cfg.get("requires_exact_architecture", False)),
                      extra_defines)
