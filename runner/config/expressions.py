"""Safe evaluation of the small integer expressions in kernel specs (rules, geometry, work).

Only arithmetic, comparisons, boolean logic, names in scope and calls of a few helpers are
allowed; anything else (attributes, subscripts, lambdas, imports) is refused before evaluation.
"""

import ast
import functools
from types import CodeType
from typing import Mapping


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


HELPERS = {"ceil_div": ceil_div, "round_up": round_up, "min": min, "max": max}

_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call,
    ast.Name, ast.Load, ast.Constant,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
    ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift,
)


class ExpressionError(ValueError):
    pass


class ArithmeticFailure(ExpressionError):
    """The expression is well formed but its arithmetic fails (a division by zero)."""


@functools.lru_cache(maxsize=4096)
def _checked(expression: str) -> tuple[CodeType, tuple[str, ...], frozenset[str]]:
    """Parse and check an expression's form once (a search plans thousands of points with the
    same rules): its code, the names it reads, and those read outside an == or != comparison."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"cannot parse expression {expression!r}: {error.msg}") from None
    # Strings (constants, and names such as `backend`) only as operands of == and !=.
    compared = {id(operand) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
                for operand in (node.left, *node.comparators)}
    read, outside = [], set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExpressionError(
                f"expression {expression!r} uses {type(node).__name__}, which is not allowed"
            )
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in HELPERS
        ):
            raise ExpressionError(f"expression {expression!r} calls something other than "
                                  f"{', '.join(HELPERS)}")
        if isinstance(node, ast.Name) and node.id not in HELPERS:
            read.append(node.id)
            if id(node) not in compared:
                outside.add(node.id)
        if isinstance(node, ast.Constant) and not (
            isinstance(node.value, (int, float))
            or (isinstance(node.value, str) and id(node) in compared)
        ):
            raise ExpressionError(f"expression {expression!r} holds a non-number constant "
                                  "(strings only in == and != comparisons)")
    return (compile(tree, "<kernel spec>", "eval"), tuple(dict.fromkeys(read)),
            frozenset(outside))


def evaluate(expression: str, names: Mapping[str, int]) -> int | bool | float:
    """Evaluate `expression` with `names` and the helpers in scope, and nothing else."""
    text = str(expression).strip()
    code, read, outside = _checked(text)
    for name in read:
        if name not in names:
            raise ExpressionError(f"expression {text!r} uses unknown name {name!r}")
        if name in outside and isinstance(names[name], str):
            raise ExpressionError(f"expression {text!r} uses {name!r}, a string, "
                                  "outside an == or != comparison")
    scope = {**HELPERS, **names}
    try:
        return eval(code, {"__builtins__": {}}, scope)  # noqa: S307
    except ArithmeticError as error:
        raise ArithmeticFailure(f"expression {text!r}: {error}") from None
    except TypeError as error:  # a string name in arithmetic
        raise ExpressionError(f"expression {text!r}: {error}") from None


def evaluate_int(expression: str, names: Mapping[str, int]) -> int:
    value = evaluate(expression, names)
    if isinstance(value, bool) or int(value) != value:
        raise ExpressionError(f"expression {expression!r} gave {value!r}, not an integer")
    return int(value)
