"""What each operation computes, its inputs, and how its result is checked.

Per operation, never per kernel: every SGEMM step shares `sgemm`, every copy/transpose step
shares `copy` or `transpose`.
"""

import functools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from omegaconf import OmegaConf

from runner.backends.base import POISON, POISON_BITS
from runner.config.schema import Operation
from runner.config.spec import ProblemSize


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    rel_error: float  # relative Frobenius error (0.0 for an exact match)
    method: str  # how it was checked, in words
    detail: str = ""  # why it failed
    launch_ms: Optional[float] = None  # the checked launch's own time (device events)


@dataclass
class Problem:
    operation: Operation
    inputs: dict[str, np.ndarray]  # operation buffer name -> host array (float32)
    output_name: str
    output_shape: tuple[int, int]
    # The output's contents before each launch, where the kernel reads them (sgemm with
    # beta != 0: C0); empty: the output is poisoned instead, so every element must be written.
    initial: dict = field(default_factory=dict)


def operation_floats(operation: Operation, size: ProblemSize) -> dict[str, int]:
    """Floats in each input and the output of `operation` at `size`, without drawing them
    (the names and shapes `make_problem` gives them)."""
    if operation is Operation.sgemm:
        return {"A": size.M * size.K, "B": size.K * size.N, "C": size.M * size.N}
    return {"src": size.M * size.N, "dst": size.M * size.N}


@functools.lru_cache(maxsize=2)
def make_problem(operation: Operation, size: ProblemSize, seed: int,
                 initial_output: bool = False) -> Problem:
    """Fresh random inputs from `seed`: uniform in [-1, 1), never zeros. The same arrays for
    the same operation, size and seed within a process (a sweep's jobs on one problem): drawing
    two 4096x4096 matrices costs more than a job's tracking. Nothing writes to them.
    `initial_output` (sgemm with beta != 0): C0 as well, drawn the same way after A and B, so
    A and B are the same arrays with or without it."""
    rng = np.random.default_rng(seed)

    def draw(rows: int, cols: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(rows, cols)).astype(np.float32)

    if operation is Operation.sgemm:
        inputs = {"A": draw(size.M, size.K), "B": draw(size.K, size.N)}
        initial = {"C": draw(size.M, size.N)} if initial_output else {}
        return Problem(operation, inputs, "C", (size.M, size.N), initial)
    if operation is Operation.copy:
        return Problem(operation, {"src": draw(size.M, size.N)}, "dst", (size.M, size.N))
    return Problem(operation, {"src": draw(size.M, size.N)}, "dst", (size.N, size.M))


def check_tolerance(cfg) -> float:
    """The tolerance a run is checked with: the step's own (`kernel.tolerance`, for a reduced
    precision step such as TF32) or else `check.tolerance`, the FP32 steps' default."""
    own = cfg.kernel.get("tolerance")
    return float(cfg.check.tolerance if own is None else own)


def effective_check(cfg):
    """A copy of `cfg.check` holding the tolerance the run is checked with (check_tolerance)."""
    checked = OmegaConf.create(OmegaConf.to_container(cfg.check, resolve=True))
    checked.tolerance = check_tolerance(cfg)
    return checked


def _first(mask: np.ndarray) -> str:
    row, col = np.argwhere(mask)[0]
    return f"[{row}, {col}]"


def never_written(result: np.ndarray) -> np.ndarray:
    """Where the output still holds the poison, bit for bit: elements the kernel never wrote."""
    return result.view(np.uint32) == POISON_BITS


def not_finite(result: np.ndarray) -> Optional[str]:
    """Elements written as NaN or Inf (the poison itself is finite), in words; None if none."""
    bad = ~np.isfinite(result)
    if not bad.any():
        return None
    return (f"{int(bad.sum())} of {result.size} output elements were written as NaN or Inf "
            f"(first at {_first(bad)}: {float(result[bad][0])})")


def _unwritten(never: np.ndarray) -> str:
    return (f"{int(never.sum())} of {never.size} output elements were never written "
            f"(first at {_first(never)}: still the poison {float(POISON):g})")


def _worst(C: np.ndarray, reference: np.ndarray, rows=None, cols=None) -> str:
    """Where C is furthest from the reference, in words ("worst at [r, c]: 1.5 instead of 2.0")."""
    gap = np.abs(C - reference)
    row, col = np.unravel_index(int(np.argmax(gap)), gap.shape)
    at_row = int(rows[row]) if rows is not None else int(row)
    at_col = int(cols[col]) if cols is not None else int(col)
    return (f"worst at [{at_row}, {at_col}]: {float(C[row, col]):.7g} instead of "
            f"{float(reference[row, col]):.7g}")


_references: dict[tuple, tuple] = {}


def _float64_reference(A: np.ndarray, B: np.ndarray, full: bool, sample_rows: int,
                       sample_cols: int, seed: int) -> tuple:
    """(rows, cols, whole product, sampled rows, sampled columns) of A·B in float64, computed
    once per pair of input arrays: a sweep's jobs on one problem (make_problem keeps it) and
    the vendor baseline share it. The entry holds A and B, so their ids stay theirs."""
    key = (id(A), id(B), full, sample_rows, sample_cols, seed)
    if key not in _references:
        M, N = A.shape[0], B.shape[1]
        if full:
            entry = (None, None, A.astype(np.float64) @ B.astype(np.float64), None, None)
        else:
            rng = np.random.default_rng(seed + 1)
            rows = rng.choice(M, size=min(sample_rows, M), replace=False)
            cols = rng.choice(N, size=min(sample_cols, N), replace=False)
            entry = (rows, cols, None, A[rows].astype(np.float64) @ B.astype(np.float64),
                     A.astype(np.float64) @ B[:, cols].astype(np.float64))
        if len(_references) >= 2:
            _references.pop(next(iter(_references)))
        _references[key] = (*entry, A, B)
    return _references[key][:5]


def check_sgemm(A: np.ndarray, B: np.ndarray, C: np.ndarray, tolerance: float,
                full_reference_max_macs: int, sample_rows: int, sample_cols: int,
                seed: int, alpha: float = 1.0, beta: float = 0.0,
                C0: Optional[np.ndarray] = None) -> CheckResult:
    """Relative Frobenius error of C against a float64 reference of alpha*A·B + beta*C0
    (A·B unless the kernel takes alpha and beta).

    Small problems: the whole product. Large ones: whole rows and whole columns of C at random
    positions, exact in float64 where they look and O((rows + cols) * K * N) to compute; every
    element of C is still checked to be written (the output was poisoned, POISON_BITS) and
    finite.
    """
    problem = not_finite(C)
    if problem:
        return CheckResult(False, float("nan"), "written and finite", problem)
    never = never_written(C)
    M, K = A.shape
    N = B.shape[1]
    full = M * N * K <= full_reference_max_macs
    rows, cols, reference, ref_rows, ref_cols = _float64_reference(A, B, full, sample_rows,
                                                                   sample_cols, seed)
    if alpha != 1.0 or beta != 0.0:  # the kernel gets float32 scalars: so does the reference
        alpha64, beta64 = float(np.float32(alpha)), float(np.float32(beta))
        if beta64 != 0.0 and C0 is None:
            raise ValueError("beta != 0 needs C's initial values C0")

        def blend(product, rows_of=slice(None), cols_of=slice(None)):
            out = alpha64 * product
            if beta64 != 0.0:
                out = out + beta64 * C0[rows_of, cols_of].astype(np.float64)
            return out

        if full:
            reference = blend(reference)
        else:
            ref_rows, ref_cols = blend(ref_rows, rows_of=rows), blend(ref_cols, cols_of=cols)
    # The error of what was written: an element still holding the poison counts as right here
    # and is reported as never written; a wrong value anywhere else is the worse news (a kernel
    # that adds to C leaves the poison as it was where its product is tiny).
    if full:
        written = np.where(never, reference, C)
        error = np.linalg.norm(written - reference) / max(np.linalg.norm(reference), 1e-300)
        method = "full float64 reference"
        worst = lambda: _worst(written, reference)  # noqa: E731
    else:
        written_rows = np.where(never[rows], ref_rows, C[rows])
        written_cols = np.where(never[:, cols], ref_cols, C[:, cols])
        diff = (np.linalg.norm(written_rows - ref_rows) ** 2
                + np.linalg.norm(written_cols - ref_cols) ** 2)
        norm = np.linalg.norm(ref_rows) ** 2 + np.linalg.norm(ref_cols) ** 2
        error = np.sqrt(diff / max(norm, 1e-300))
        method = (f"float64 reference on {len(rows)} random rows and {len(cols)} random columns, "
                  "written and finite check on all of C")
        worst = lambda: _worst(written_rows, ref_rows, rows=rows)  # noqa: E731
    if alpha != 1.0 or beta != 0.0:
        method += f" of alpha*A·B + beta*C0 (alpha={alpha:g}, beta={beta:g})"
    error = float(error)
    if not error <= tolerance:
        unwritten = f"; besides, {_unwritten(never)}" if never.any() else ""
        return CheckResult(False, error, method,
                           f"relative error {error:.3e} exceeds the tolerance {tolerance:.1e}: "
                           f"wrong values, {worst()}{unwritten}")
    if never.any():
        return CheckResult(False, float("nan"), method, _unwritten(never))
    return CheckResult(True, error, method)


def check_exact(expected: np.ndarray, result: np.ndarray) -> CheckResult:
    """Bitwise equality: a copy or a transpose moves values, it must not change one bit."""
    if expected.shape != result.shape:
        return CheckResult(False, float("nan"), "bitwise", f"shape {result.shape} != "
                                                            f"{expected.shape}")
    differ = expected.view(np.uint32) != result.view(np.uint32)
    never = differ & never_written(result)
    if never.any():
        return CheckResult(False, float("nan"), "bitwise equality", _unwritten(never))
    if differ.any():
        row, col = np.argwhere(differ)[0]
        return CheckResult(False, float("nan"), "bitwise equality",
                           f"{int(differ.sum())} of {result.size} elements differ "
                           f"(first at [{row}, {col}]: {result[row, col]!r} instead of "
                           f"{expected[row, col]!r})")
    return CheckResult(True, 0.0, "bitwise equality")


def check_result(operation: Operation, problem: Problem, result: np.ndarray, check_cfg,
                 seed: int, alpha: float = 1.0, beta: float = 0.0) -> CheckResult:
    if operation is Operation.sgemm:
        return check_sgemm(problem.inputs["A"], problem.inputs["B"], result, check_cfg.tolerance,
                           check_cfg.full_reference_max_macs, check_cfg.sample_rows,
                           check_cfg.sample_cols, seed, alpha, beta, problem.initial.get("C"))
    source = problem.inputs["src"]
    expected = source if operation is Operation.copy else np.ascontiguousarray(source.T)
    return check_exact(expected, result)
