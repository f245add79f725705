"""What each operation computes, its inputs, and how its result is checked.

Per operation, never per kernel: every SGEMM step shares `sgemm`, every copy/transpose step
shares `copy` or `transpose`.
"""

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from omegaconf import OmegaConf

from runner.backends.base import POISON, POISON_BITS
from runner.config.measurement import check_tolerance
from runner.config.schema import Operation
from runner.config.spec import ProblemSize
from runner.run.timing import outside_timed_windows


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


# Problems a worker keeps between jobs: up to this many bytes of arrays (their references
# included), or a quarter of the host's available memory where that is less (problem_cache_limit).
PROBLEM_CACHE_MAX_BYTES = 2 << 30
_DRAW_BLOCK = 1 << 16  # float64s drawn at a time (512 KiB): the draw stays in the CPU's cache


def problem_cache_limit(held: int = 0) -> int:
    """Bytes the kept problems may hold: 2 GiB, or a quarter of the host's available memory
    (psutil) counting the `held` bytes of the cache itself as available, whichever is less."""
    try:
        import psutil

        available = int(psutil.virtual_memory().available)
    except Exception:  # no psutil, or an OS it cannot read: the cap alone
        return PROBLEM_CACHE_MAX_BYTES
    return min(PROBLEM_CACHE_MAX_BYTES, (available + held) // 4)


def _problem_bytes(problem: "Problem") -> int:
    return sum(array.nbytes for array in (*problem.inputs.values(), *problem.initial.values()))


@dataclass
class _Kept:
    problem: "Problem"
    nbytes: int  # its arrays and the references kept with it
    references: dict = field(default_factory=dict)  # _float64_reference's entries for it


class ProblemCache:
    """The problems a worker has drawn, least recently used first, bounded by the bytes of
    their arrays and references (`problem_cache_limit`) instead of by their number: a sweep
    that goes kernel by kernel over five shapes draws each shape once, not once per job. The
    problem used last is always kept (its job holds it anyway), however large."""

    def __init__(self, limit=problem_cache_limit):
        self._limit = limit  # held bytes -> the bytes the cache may hold
        self._kept: "OrderedDict[tuple, _Kept]" = OrderedDict()
        self._lock = threading.RLock()

    @property
    def nbytes(self) -> int:
        return sum(kept.nbytes for kept in self._kept.values())

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: tuple) -> bool:
        return key in self._kept

    def get(self, key: tuple) -> Optional["Problem"]:
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            self._kept.move_to_end(key)
            return kept.problem

    def put(self, key: tuple, problem: "Problem") -> None:
        with self._lock:
            self._kept.pop(key, None)
            self._kept[key] = _Kept(problem, _problem_bytes(problem))
            self._evict()

    def owner(self, A: np.ndarray, B: np.ndarray) -> Optional[_Kept]:
        """The kept sgemm problem whose inputs are these very arrays (used last), or None."""
        with self._lock:
            for key, kept in reversed(self._kept.items()):
                inputs = kept.problem.inputs
                if inputs.get("A") is A and inputs.get("B") is B:
                    self._kept.move_to_end(key)
                    return kept
            return None

    def keep_reference(self, kept: _Kept, key: tuple, entry: tuple) -> None:
        """A reference kept with its problem (and dropped with it), its bytes counted."""
        with self._lock:
            kept.references[key] = entry
            kept.nbytes += sum(part.nbytes for part in entry if isinstance(part, np.ndarray))
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def _evict(self) -> None:
        held = self.nbytes
        limit = self._limit(held)
        while held > limit and len(self._kept) > 1:
            _, dropped = self._kept.popitem(last=False)
            held -= dropped.nbytes


_problems = ProblemCache()


# Draws of at least this many floats are split between threads (numpy's generator and ufuncs
# release the GIL), each from its own copy of the stream advanced to its first element.
_PARALLEL_DRAW_MIN = 1 << 22


def _draw_threads() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return max(1, min(8, cores))


def _uniform_float32(seed: int, offset: int, rows: int, cols: int) -> np.ndarray:
    """`rng.uniform(-1.0, 1.0, (rows, cols)).astype(np.float32)` bit for bit, where `rng` is
    `np.random.default_rng(seed)` after `offset` draws, without the whole float64 array:
    uniform(low, high) is low + (high - low) * the generator's next double, which is what
    `random` gives, one per element in the same order; drawn a block at a time into a buffer
    that stays in cache (2.0 * d is exact, so -1.0 + 2.0 * d rounds as uniform's own sum does).
    A large draw is cut into one span per thread, each drawn from PCG64 advanced to its start:
    the same stream, so the same bits."""
    out = np.empty(rows * cols, dtype=np.float32)
    threads = _draw_threads() if out.size >= _PARALLEL_DRAW_MIN else 1
    span = max(1, -(-out.size // threads))
    span += -span % _DRAW_BLOCK  # whole blocks, so every thread's buffer is the same size

    def draw(start: int) -> None:
        rng = np.random.Generator(np.random.PCG64(seed).advance(offset + start))
        stop = min(start + span, out.size)
        block = np.empty(min(_DRAW_BLOCK, stop - start), dtype=np.float64)
        for first in range(start, stop, _DRAW_BLOCK):
            outside_timed_windows()  # a draw ahead of its job pauses while launches are timed
            part = block[:min(_DRAW_BLOCK, stop - first)]
            rng.random(out=part)
            part *= 2.0
            part -= 1.0
            out[first:first + part.size] = part  # rounded to float32 as astype does

    starts = range(0, out.size, span)
    if threads == 1:
        for start in starts:
            draw(start)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(draw, starts))
    return out.reshape(rows, cols)


def draw_problem(operation: Operation, size: ProblemSize, seed: int,
                 initial_output: bool = False) -> Problem:
    """Fresh random inputs from `seed`, drawn now (make_problem keeps them): A, B (and C0) one
    after another from one stream, as `np.random.default_rng(seed).uniform` would."""
    drawn = 0

    def draw(rows: int, cols: int) -> np.ndarray:
        nonlocal drawn
        array = _uniform_float32(seed, drawn, rows, cols)
        drawn += rows * cols
        return array

    if operation is Operation.sgemm:
        inputs = {"A": draw(size.M, size.K), "B": draw(size.K, size.N)}
        initial = {"C": draw(size.M, size.N)} if initial_output else {}
        return Problem(operation, inputs, "C", (size.M, size.N), initial)
    if operation is Operation.copy:
        return Problem(operation, {"src": draw(size.M, size.N)}, "dst", (size.M, size.N))
    return Problem(operation, {"src": draw(size.M, size.N)}, "dst", (size.N, size.M))


def make_problem(operation: Operation, size: ProblemSize, seed: int,
                 initial_output: bool = False) -> Problem:
    """Fresh random inputs from `seed`: uniform in [-1, 1), never zeros. The same arrays for
    the same operation, size and seed within a process (a sweep's jobs on one problem, in any
    order: kept while they fit ProblemCache's bytes): drawing two 4096x4096 matrices costs more
    than a job's tracking. Nothing writes to them.
    `initial_output` (sgemm with beta != 0): C0 as well, drawn the same way after A and B, so
    A and B are the same values with or without it."""
    key = (operation, size, seed, bool(initial_output))
    problem = _problems.get(key)
    if problem is None:
        problem = draw_problem(operation, size, seed, bool(initial_output))
        _problems.put(key, problem)
    return problem


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


# References of arrays no kept problem holds (a test's own, a problem the cache let go of):
# the last two pairs, each entry holding its A and B so that their ids stay theirs.
_references: dict[tuple, tuple] = {}


def _float64_reference(A: np.ndarray, B: np.ndarray, full: bool, sample_rows: int,
                       sample_cols: int, seed: int) -> tuple:
    """(rows, cols, whole product, sampled rows, sampled columns) of A·B in float64, computed
    once per pair of input arrays: a sweep's jobs on one problem and the vendor baseline share
    it. Kept with the problem where make_problem keeps A and B (ProblemCache: its bytes
    counted with the problem's, dropped with it), else among the last two pairs."""
    key = (full, sample_rows, sample_cols, seed)
    kept = _problems.owner(A, B)
    if kept is not None and key in kept.references:
        return kept.references[key]
    loose = (id(A), id(B), *key)
    if kept is None and loose in _references:
        return _references[loose][:5]
    M, N = A.shape[0], B.shape[1]
    if full:
        entry = (None, None, A.astype(np.float64) @ B.astype(np.float64), None, None)
    else:
        rng = np.random.default_rng(seed + 1)
        rows = rng.choice(M, size=min(sample_rows, M), replace=False)
        cols = rng.choice(N, size=min(sample_cols, N), replace=False)
        entry = (rows, cols, None, A[rows].astype(np.float64) @ B.astype(np.float64),
                 A.astype(np.float64) @ B[:, cols].astype(np.float64))
    if kept is not None:
        _problems.keep_reference(kept, key, entry)
    else:
        if len(_references) >= 2:
            _references.pop(next(iter(_references)))
        _references[loose] = (*entry, A, B)
    return entry


def prepare_reference(problem: Problem, check_cfg, seed: int) -> None:
    """The float64 reference `check_result` will compare this problem's result with, made now
    and kept as that call keeps it (runner/run/ahead.py); nothing for a copy or transpose,
    whose reference is the input itself."""
    if problem.operation is not Operation.sgemm:
        return
    A, B = problem.inputs["A"], problem.inputs["B"]
    full = A.shape[0] * B.shape[1] * A.shape[1] <= check_cfg.full_reference_max_macs
    _float64_reference(A, B, full, check_cfg.sample_rows, check_cfg.sample_cols, seed)


def clear_caches() -> bool:
    """Forget every kept problem and reference (tests; a worker that must give memory back).
    Whether anything was kept."""
    held = bool(len(_problems) or _references)
    _problems.clear()
    _references.clear()
    return held


_SCAN_BLOCK = 1 << 18  # floats per block of a full-array pass (1 MiB): block and mask in cache


def _scan(result: np.ndarray) -> tuple[bool, bool]:
    """(every element finite, some element still the poison bit for bit) in one pass over
    `result`, a block at a time: each block is read from memory once and tested twice while in
    cache, without a whole-array mask. Exactly `np.isfinite(result).all()` and
    `never_written(result).any()`."""
    flat = np.ravel(result)  # a view of a contiguous result
    bits = flat.view(np.uint32)
    mask = np.empty(min(_SCAN_BLOCK, flat.size), dtype=bool)
    finite, poisoned = True, False
    for start in range(0, flat.size, _SCAN_BLOCK):
        stop = min(start + _SCAN_BLOCK, flat.size)
        part = mask[:stop - start]
        if finite:
            np.isfinite(flat[start:stop], out=part)
            finite = bool(part.all())
        if not poisoned:
            np.equal(bits[start:stop], POISON_BITS, out=part)
            poisoned = bool(part.any())
    return finite, poisoned


_TILE = 256  # rows and columns of a tile compared at once where `expected` is a transpose


def _same_bits(expected: np.ndarray, result: np.ndarray) -> bool:
    """Whether two 2-D arrays of one shape hold the same bits everywhere, compared a tile at a
    time with no whole-array mask: blocks of whole rows where both are laid out alike, square
    tiles where `expected` is a transpose (a view of the source, never copied: a tile of it
    fits in cache, where a whole transposed copy reads the source across its rows)."""
    if result.size == 0:
        return True
    expected_bits, result_bits = expected.view(np.uint32), result.view(np.uint32)
    rows, cols = result.shape
    if expected.flags.c_contiguous and result.flags.c_contiguous:
        tile_rows, tile_cols = max(1, _SCAN_BLOCK // max(1, cols)), cols
    else:
        tile_rows, tile_cols = _TILE, _TILE
    mask = np.empty((min(tile_rows, rows), min(tile_cols, cols)), dtype=bool)
    for top in range(0, rows, tile_rows):
        for left in range(0, cols, tile_cols):
            theirs = result_bits[top:top + tile_rows, left:left + tile_cols]
            part = mask[:theirs.shape[0], :theirs.shape[1]]
            np.equal(expected_bits[top:top + tile_rows, left:left + tile_cols], theirs, out=part)
            if not part.all():
                return False
    return True


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
    finite, poisoned = _scan(C)  # both whole-array tests in one pass
    if not finite:
        return CheckResult(False, float("nan"), "written and finite", not_finite(C))
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
        written = np.where(never_written(C), reference, C)
        error = np.linalg.norm(written - reference) / max(np.linalg.norm(reference), 1e-300)
        method = "full float64 reference"
        worst = lambda: _worst(written, reference)  # noqa: E731
    else:
        picked_rows, picked_cols = C[rows], C[:, cols]  # never_written of these alone
        written_rows = np.where(never_written(picked_rows), ref_rows, picked_rows)
        written_cols = np.where(never_written(picked_cols), ref_cols, picked_cols)
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
        unwritten = f"; besides, {_unwritten(never_written(C))}" if poisoned else ""
        return CheckResult(False, error, method,
                           f"relative error {error:.3e} exceeds the tolerance {tolerance:.1e}: "
                           f"wrong values, {worst()}{unwritten}")
    if poisoned:
        return CheckResult(False, float("nan"), method, _unwritten(never_written(C)))
    return CheckResult(True, error, method)


def check_exact(expected: np.ndarray, result: np.ndarray) -> CheckResult:
    """Bitwise equality: a copy or a transpose moves values, it must not change one bit.
    `expected` may be a view (a transpose of the source), never copied here."""
    if expected.shape != result.shape:
        return CheckResult(False, float("nan"), "bitwise", f"shape {result.shape} != "
                                                            f"{expected.shape}")
    if _same_bits(expected, result):  # the usual case, in one pass and no whole-array mask
        return CheckResult(True, 0.0, "bitwise equality")
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
    expected = source if operation is Operation.copy else source.T  # a view: compared as is
    return check_exact(expected, result)
