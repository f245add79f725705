"""From a composed kernel config and a problem size to a checked launch plan.

Everything a user can set is checked here, before anything is compiled: sizes, that every tiling
parameter is an integer among its allowed values, the kernel's own constraints (each failure
names the rule and its reason), and the launch geometry. Only values that pass reach a compiler
option string, as `-DNAME=value`.
"""

import ast
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from runner.config.expressions import (
    HELPERS,
    ArithmeticFailure,
    ExpressionError,
    evaluate,
    evaluate_int,
)
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
class ScalarArg:
    """A constant argument from the spec's `args` (`alpha=1.0f`, `lda=K`), as the kernel gets it."""
    name: str
    kind: str  # "int" (int32) or "float" (float32)
    value: int | float

    def __str__(self) -> str:
        return f"{self.name}={self.value}{'f' if self.kind == 'float' else ''}"


_SCALAR = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$")
_FLOAT32 = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?[fF]$")
_FLOAT64 = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+[eE][+-]?\d+|\d+\.\d*[eE][+-]?\d+)$")
FLOAT32_MAX = 3.4028234663852886e38
BLAS_SCALARS = ("alpha", "beta")  # sgemm: C = alpha*A*B + beta*C


def parse_arg(name: str, entry: str, text: str, known: set, names: Mapping[str, int]):
    """One `args` entry: a known name as it is, `name=value` as a ScalarArg, or
    `tensor_map(BUFFER, ...)` as a TensorMapArg."""
    text = str(text)
    if _TENSOR_MAP.match(text):
        return parse_tensor_map(f"{name}: launch {entry}", text, known, names)
    match = _SCALAR.match(text)
    if match is None:
        if text not in known:
            raise RunError(f"{name}: launch {entry} names unknown argument {text!r} (known: "
                           f"{sorted(known)}; a scalar is written name=value, e.g. alpha=1.0f)")
        return text
    scalar, value = match.groups()
    if scalar in known:
        raise RunError(f"{name}: launch {entry}: scalar {text!r} has the name of an argument the "
                       "runner provides; give it its parameter's own name")
    if _FLOAT32.match(value):
        number = float(value[:-1])
        if not abs(number) <= FLOAT32_MAX:
            raise RunError(f"{name}: launch {entry}: {text!r} does not fit a float32")
        return ScalarArg(scalar, "float", number)
    if _FLOAT64.match(value):
        raise RunError(f"{name}: launch {entry}: {text!r}: write {value}f for a float "
                       "(scalars are float32 with C's f suffix, or int32 expressions)")
    try:
        number = evaluate_int(value, names)
    except ExpressionError as error:
        raise RunError(f"{name}: launch {entry}: bad scalar {text!r}: {error} (a float32 "
                       "constant such as 1.0f, or an integer expression)") from None
    if not -INT32_MAX - 1 <= number <= INT32_MAX:
        raise RunError(f"{name}: launch {entry}: {text!r} = {number} does not fit an int32")
    return ScalarArg(scalar, "int", number)


@dataclass(frozen=True)
class TensorMapArg:
    """A TMA tensor map over a buffer, from the spec's `args` (CUDA on sm_90 and later): the
    buffer seen as `rows` x `cols` float32s, `ld` floats from one row to the next, copied in
    boxes of `box_rows` x `box_cols` with the given shared-memory swizzle (0, 32, 64 or 128
    bytes). The kernel takes it as a `const __grid_constant__` 128-byte, 64-byte aligned
    struct (CUtensorMap); the backend encodes it once the buffer exists (Backend.tensor_map)."""
    buffer: str
    rows: int
    cols: int
    ld: int
    box_rows: int
    box_cols: int
    swizzle: int = 0

    def __str__(self) -> str:
        return (f"tensor_map({self.buffer}, rows={self.rows}, cols={self.cols}, ld={self.ld}, "
                f"box={self.box_rows}x{self.box_cols}, swizzle={self.swizzle})")

    @property
    def floats(self) -> int:
        """How many floats of the buffer it reaches, from its start."""
        return (self.rows - 1) * self.ld + self.cols


TENSOR_MAP_SWIZZLES = (0, 32, 64, 128)  # bytes: none, and CUDA's 32B, 64B and 128B patterns
TENSOR_MAP_KEYS = {"rows", "cols", "ld", "box_rows", "box_cols", "swizzle"}
_TENSOR_MAP = re.compile(r"^\s*tensor_map\s*\(")
TENSOR_MAP_FORM = ("tensor_map(BUFFER, rows=EXPR, cols=EXPR, box_rows=EXPR, box_cols=EXPR"
                   "[, ld=EXPR][, swizzle=0|32|64|128]), BUFFER a buffer's name or "
                   "`NAME if CONDITION else NAME`")


def _tensor_map_buffer(where: str, node, known: set, names: Mapping[str, int]) -> str:
    """The buffer a tensor map is over: a name, or `X if condition else Y` (a padded copy
    where the rows are not 16-byte aligned, say), the condition evaluated like a `when`."""
    if isinstance(node, ast.IfExp):
        try:
            chosen = node.body if evaluate(ast.unparse(node.test), names) else node.orelse
        except ExpressionError as error:
            raise RunError(f"{where}: bad buffer condition: {error}") from None
        return _tensor_map_buffer(where, chosen, known, names)
    buffers = known - {"M", "N", "K"}
    if not isinstance(node, ast.Name) or node.id not in buffers:
        raise RunError(f"{where}: {ast.unparse(node)!r} is not a buffer (buffers: "
                       f"{sorted(buffers)})")
    return node.id


def parse_tensor_map(where: str, text: str, known: set, names: Mapping[str, int]) -> TensorMapArg:
    """`tensor_map(A, rows=M, cols=K, box_rows=BM, box_cols=32, swizzle=128)` as a TensorMapArg,
    every value an integer expression over the parameters, defines and sizes, checked against
    what the TMA unit takes (cuTensorMapEncodeTiled's limits) before anything runs."""
    where = f"{where}: {text.strip()!r}"
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        raise RunError(f"{where}: cannot parse it ({error.msg}); write {TENSOR_MAP_FORM}") from None
    if not isinstance(call, ast.Call) or len(call.args) != 1 or any(
            keyword.arg is None for keyword in call.keywords):
        raise RunError(f"{where}: write {TENSOR_MAP_FORM}")
    given = [keyword.arg for keyword in call.keywords]
    unknown = sorted(set(given) - TENSOR_MAP_KEYS)
    missing = sorted({"rows", "cols", "box_rows", "box_cols"} - set(given))
    if unknown or missing or len(set(given)) != len(given):
        problem = (f"unknown key(s) {', '.join(unknown)}" if unknown else
                   f"missing {', '.join(missing)}" if missing else "a key given twice")
        raise RunError(f"{where}: {problem}; write {TENSOR_MAP_FORM}")
    buffer = _tensor_map_buffer(where, call.args[0], known, names)
    values = {}
    for keyword in call.keywords:
        try:
            values[keyword.arg] = evaluate_int(ast.unparse(keyword.value), names)
        except ExpressionError as error:
            raise RunError(f"{where}: bad {keyword.arg}: {error}") from None
    values.setdefault("ld", values["cols"])
    values.setdefault("swizzle", 0)
    arg = TensorMapArg(buffer, values["rows"], values["cols"], values["ld"], values["box_rows"],
                       values["box_cols"], values["swizzle"])
    if not (1 <= arg.rows <= 2**32 and 1 <= arg.cols <= 2**32):
        raise RunError(f"{where}: rows={arg.rows}, cols={arg.cols}: each must be within 1..2^32")
    if arg.ld < arg.cols:
        raise RunError(f"{where}: ld={arg.ld} is less than cols={arg.cols}")
    if (arg.ld * 4) % 16 or arg.ld * 4 >= 2**40:
        raise RunError(f"{where}: ld={arg.ld} floats is {arg.ld * 4} bytes from row to row, and "
                       "TMA needs a multiple of 16 bytes (under 2^40): copy the rows into a "
                       "padded scratch buffer for such sizes (`A if K % 4 == 0 else AP`)")
    if not (1 <= arg.box_rows <= 256 and 1 <= arg.box_cols <= 256):
        raise RunError(f"{where}: a box of {arg.box_rows}x{arg.box_cols}: each side must be "
                       "within 1..256")
    if (arg.box_cols * 4) % 16:
        raise RunError(f"{where}: box_cols={arg.box_cols} floats is {arg.box_cols * 4} bytes, "
                       "and TMA copies whole 16 bytes along a row")
    if arg.swizzle not in TENSOR_MAP_SWIZZLES:
        raise RunError(f"{where}: swizzle={arg.swizzle} is none of "
                       f"{', '.join(map(str, TENSOR_MAP_SWIZZLES))} (bytes)")
    if arg.swizzle and arg.box_cols * 4 > arg.swizzle:
        raise RunError(f"{where}: a box row of {arg.box_cols * 4} bytes is wider than its "
                       f"{arg.swizzle}-byte swizzle")
    return arg


_CPP_NAME = re.compile(r"^(::)?[A-Za-z_]\w*(::[A-Za-z_]\w*)*$")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _template_arguments(text: str) -> list[str]:
    """`A, f(B, C), T<D, E>` -> the top-level arguments (commas inside brackets stay)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "<([" and 1 or 0
        depth -= char in ">)]" and 1 or 0
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + [current]


def resolve_entry(name: str, entry: str, names: Mapping[str, int]) -> tuple[str, set]:
    """A launch's `entry` as the compiler is asked for it, and the parameters and defines that
    feed its template arguments. `ns::gemm` stays as it is; in `Sgemm<BM, BK * 2, true, float>`
    each argument that is an expression over the parameters and defines is replaced by its
    value (`Sgemm<128, 16, true, float>`), C++ literals and type names stay as written."""
    entry = str(entry).strip()
    if "<" not in entry:
        if not _CPP_NAME.match(entry):
            raise RunError(f"{name}: entry {entry!r} is not a function name (a C name, "
                           "ns::name, or a template such as name<BM, BN>)")
        return entry, set()
    base, _, rest = entry.partition("<")
    base = base.strip()
    if not _CPP_NAME.match(base) or not rest.rstrip().endswith(">"):
        raise RunError(f"{name}: entry {entry!r} is not a template instantiation "
                       "(name<argument, ...>)")
    resolved, used = [], set()
    for argument in _template_arguments(rest.rstrip()[:-1]):
        argument = argument.strip()
        identifiers = set(_IDENTIFIER.findall(argument)) - {"true", "false"}
        macros = {i for i in identifiers if MACRO_NAME.match(i) and len(i) > 1}
        if argument in ("true", "false") or (identifiers and not identifiers <= set(names)
                                             and not macros):
            resolved.append(argument)  # a C++ literal or a type name: as written
            continue
        unknown = sorted(identifiers - set(names) - set(HELPERS))
        if unknown:
            raise RunError(f"{name}: template argument {argument!r} of entry {entry!r} names "
                           f"{', '.join(unknown)}, which is no parameter or define")
        try:
            value = evaluate(argument, names)
        except ExpressionError as error:
            raise RunError(f"{name}: template argument {argument!r} of entry {entry!r}: "
                           f"{error}") from None
        if isinstance(value, bool):
            resolved.append("true" if value else "false")
        elif isinstance(value, int) or float(value).is_integer():
            resolved.append(str(int(value)))
        else:
            raise RunError(f"{name}: template argument {argument!r} of entry {entry!r} gave "
                           f"{value!r}, not an integer or a truth value")
        used |= identifiers & set(names)
    return f"{base}<{', '.join(resolved)}>", used


def entry_label(entry: str) -> str:
    """An entry as a file or metric name: `ns::Sgemm<128, 8, true>` -> `ns_Sgemm_128_8_true`."""
    return re.sub(r"\W+", "_", entry).strip("_") or "entry"


@dataclass(frozen=True)
class Launch:
    entry: str
    args: tuple  # names (str), ScalarArg constants and TensorMapArgs, in parameter order
    local: tuple[int, ...]
    groups: tuple[int, ...]
    local_bytes: int = 0  # dynamic local/shared memory
    main: bool = False  # the spec's `main: true`
    overlap_previous: bool = False  # the spec's `overlap_previous` held (CUDA sm_90+ only)

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
    # Parameters and defines that feed a template argument of an entry: not macros as well
    # (-DBM=128 would rewrite the template's own `int BM` into `int 128`).
    template_params: frozenset = frozenset()
    # backend -> headers beside the source included ahead of it (the spec's `include_first`).
    include_first: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def defines(self) -> dict[str, int]:
        """Every -DNAME=value the source is compiled with: the parameters, then the defines,
        less those that feed template arguments."""
        return {name: value for name, value in {**self.params, **self.extra_defines}.items()
                if name not in self.template_params}

    def blas_scalar(self, which: str, default: float) -> float:
        """sgemm's alpha or beta: the main launch's scalar of that name, else `default`."""
        for arg in self.main_launch.args:
            if isinstance(arg, ScalarArg) and arg.name == which:
                return float(arg.value)
        return default

    @property
    def blas_alpha(self) -> float:
        return self.blas_scalar("alpha", 1.0) if self.operation is Operation.sgemm else 1.0

    @property
    def blas_beta(self) -> float:
        """Non-zero: C's buffer holds C0 before every launch and the result is checked against
        alpha*A*B + beta*C0."""
        return self.blas_scalar("beta", 0.0) if self.operation is Operation.sgemm else 0.0

    @property
    def scalars(self) -> dict[str, str]:
        """Every launch's scalar arguments, as written out (recorded, and in the measurement key)."""
        return {f"{launch.entry}.{arg.name}": str(arg) for launch in self.launches
                for arg in launch.args if isinstance(arg, ScalarArg)}

    @property
    def tensor_maps(self) -> list["TensorMapArg"]:
        """Every TMA tensor map the launches pass (a backend that cannot make them refuses)."""
        return [arg for launch in self.launches for arg in launch.args
                if isinstance(arg, TensorMapArg)]

    @property
    def entries(self) -> list[str]:
        return list(dict.fromkeys(launch.entry for launch in self.launches))

    @property
    def main_launch(self) -> Launch:
        """The launch the step is about: the one marked `main: true`, else its function named
        as the step (a pre-pass may come before it, a pass that sums split-K slices after it),
        else the last one."""
        return next((launch for launch in self.launches if launch.main),
                    next((launch for launch in self.launches if launch.entry == self.name),
                         self.launches[-1]))

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
    return _launch_condition(name, launch_cfg, "when", names, default=True)


def _launch_condition(name: str, launch_cfg, key: str, names: Mapping[str, int],
                      default: bool) -> bool:
    expression = launch_cfg.get(key)
    if expression is None:
        return default
    try:
        return bool(evaluate(expression, names))
    except ExpressionError as error:
        raise RunError(f"{name}: bad `{key}` of launch {launch_cfg.entry}: {error}") from None


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
    launches, template_params = [], set()
    for launch_cfg in kernel_cfg.launches:
        if not _launch_wanted(name, launch_cfg, names):
            continue
        entry, feeding = resolve_entry(name, launch_cfg.entry, {**params, **extra_defines})
        template_params |= feeding
        args = tuple(parse_arg(name, launch_cfg.entry, arg, known_args, names)
                     for arg in launch_cfg.args)
        scalar_names = [arg.name for arg in args if isinstance(arg, ScalarArg)]
        if len(set(scalar_names)) != len(scalar_names):
            raise RunError(f"{name}: launch {launch_cfg.entry} names a scalar twice: "
                           f"{scalar_names}")
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
        overlap = bool(launches) and _launch_condition(name, launch_cfg, "overlap_previous",
                                                       names, default=False)
        launches.append(Launch(entry, args, local, groups, local_bytes,
                               bool(launch_cfg.get("main", False)), overlap))
    if not launches:
        raise RunError(f"{name}: the spec lists no launches")
    if sum(launch.main for launch in launches) > 1:
        raise RunError(f"{name}: more than one launch says main: true")
    max_registers = kernel_cfg.get("max_registers")
    if max_registers is not None and not 16 <= max_registers <= 255:
        raise Refused(f"{name}: max_registers={max_registers} must be within 16..255")
    precision = kernel_cfg.get("precision", "fp32")
    include_first = {backend: tuple(headers or ())
                     for backend, headers in (kernel_cfg.get("include_first") or {}).items()}
    unknown = sorted(set(include_first) - {"opencl", "cuda"})
    if unknown:
        raise Refused(f"{name}: include_first names {unknown[0]!r}, not a backend "
                      "(write include_first: {opencl: [settings.h]})")
    return KernelPlan(name, operation, params, size, tuple(launches), scratch, flops, min_bytes,
                      max_registers, getattr(precision, "value", precision),
                      kernel_cfg.get("requires_compute_capability"),
                      bool(kernel_cfg.get("requires_exact_architecture", False)),
                      extra_defines, frozenset(template_params), include_first)
