"""Safe evaluation of the small integer expressions in kernel specs (rules, geometry, work).

Only arithmetic, comparisons, boolean logic, names in scope and calls of a few helpers are
allowed; anything else (attributes, subscripts, lambdas, imports) is refused before evaluation.
"""

import ast
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


def evaluate(expression: str, names: Mapping[str, int]) -> int | bool | float:
    """Evaluate `expression` with `names` and the helpers in scope, and nothing else."""
    try:
        tree = ast.parse(str(expression).strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"cannot parse expression {expression!r}: {error.msg}") from None
    # Strings (constants, and names such as `backend`) only as operands of == and !=.
    compared = {id(operand) for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
                for operand in (node.left, *node.comparators)}
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
        if isinstance(node, ast.Name) and node.id not in names and node.id not in HELPERS:
            raise ExpressionError(f"expression {expression!r} uses unknown name {node.id!r}")
        if (isinstance(node, ast.Name) and isinstance(names.get(node.id), str)
                and id(node) not in compared):
            raise ExpressionError(f"expression {expression!r} uses {node.id!r}, a string, "
                                  "outside an == or != comparison")
        if isinstance(node, ast.Constant) and not (
            isinstance(node.value, (int, float))
            or (isinstance(node.value, str) and id(node) in compared)
        ):
            raise ExpressionError(f"expression {expression!r} holds a non-number constant "
                                  "(strings only in == and != comparisons)")
    scope = {**HELPERS, **names}
    try:
        return eval(compile(tree, "<kernel spec>", "eval"), {"__builtins__": {}}, scope)  # noqa: S307
    except ArithmeticError as error:
        raise ArithmeticFailure(f"expression {expression!r}: {error}") from None
    except TypeError as error:  # a string name in arithmetic
        raise ExpressionError(f"expression {expression!r}: {error}") from None


def evaluate_int(expression: str, names: Mapping[str, int]) -> int:
    value = evaluate(expression, names)
    if isinstance(value, bool) or int(value) != value:
        raise ExpressionError(f"expression {expression!r} gave {value!r}, not an integer")
    return int(value)
