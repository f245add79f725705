"""Guard zones: every buffer a kernel gets sits inside a larger one whose regions before and
after it hold a sentinel. After the checked launch, a guard that changed means the kernel wrote
outside its buffer, and an input that changed means it wrote into its inputs: both fail the run.
A large input is compared on the device with a copy made at its upload, so that only its guards
come back to the host (at 8192, A and B are 512 MB), and it is downloaded only to say where it
changed; a small one comes back whole, which costs less than the compare, except on CUDA,
which compares every input on the device (Backend.compares_small_inputs).

The kernel and every timed launch get the same inner views, so nothing is measured differently:
the inner view starts 64 KiB (or a multiple) into the allocation, keeping every alignment a
kernel or an OpenCL sub-buffer needs.
"""

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from runner.backends.base import Backend

GUARD_UNIT_FLOATS = 16 * 1024  # 64 KiB: the least guard, and the step guards grow by
# From 16 MB on, an input is compared on the device: below, its download is cheaper than the
# compare (OpenCL's first compare in a process builds a reduction kernel, 0.1 s on a CPU); a
# backend may compare every input there (Backend.compares_small_inputs: CUDA).
DEVICE_COMPARE_MIN_FLOATS = 1 << 22
# A NaN with a payload no arithmetic produces (compared as bits, never as floats).
SENTINEL_BITS = np.uint32(0x7FBADBAD)


def guard_floats(row_floats: int) -> int:
    """At least 64 KiB or one row of the matrix, whichever is larger, in whole 64 KiB steps."""
    units = max(1, -(-max(1, row_floats) // GUARD_UNIT_FLOATS))
    return units * GUARD_UNIT_FLOATS


@dataclass
class GuardedBuffer:
    whole: Any  # the allocation: guard, buffer, guard
    inner: Any  # the view the kernel gets
    guard: int  # floats in each guard
    count: int  # floats in the buffer itself
    original: Optional[np.ndarray] = None  # an input's values, to find writes into it
    pristine: Any = None  # a device copy of an input's buffer, compared on the device


def _sentinelled(backend: Backend, count: int, guard: int,
                 inner: Optional[np.ndarray]) -> Any:
    """A device allocation of guard + count + guard words: the guards hold the sentinel, and
    the buffer `inner`'s values, or the sentinel too. Filled on the device and `inner` copied
    into place, so that no padded copy of it is made on the host."""
    if inner is not None and not guard:
        return backend.upload(inner)
    whole = backend.filled(guard + count + guard, int(SENTINEL_BITS))
    if inner is not None:
        backend.write(whole, guard, inner)
    return whole


# Buffers made before their job asked for them (runner/run/ahead.py), each taken once by the
# guarded_upload or guarded_alloc call it stands for: the same allocation that call would make,
# untouched since. Keyed by the backend object and the array itself (a staged buffer holds its
# array, so the id stays that array's) or, for an output, its size.
_staged: dict[tuple, GuardedBuffer] = {}


def _upload_key(backend: Backend, array: np.ndarray, guard: int) -> tuple:
    return (id(backend), "upload", id(array), guard)


def _alloc_key(backend: Backend, count: int, guard: int) -> tuple:
    return (id(backend), "alloc", count, guard)


def guarded_upload(backend: Backend, array: np.ndarray, row_floats: int,
                   guarded: bool = True) -> GuardedBuffer:
    """`array` on the device between two guards; with `guarded` false, alone (a sanitizer
    checks the bounds of the allocation itself, which guards would widen)."""
    guard = guard_floats(row_floats) if guarded else 0
    staged = _staged.pop(_upload_key(backend, array, guard), None)
    if staged is not None:
        return staged
    whole = _sentinelled(backend, array.size, guard, array)
    inner = backend.view(whole, guard, array.size) if guard else whole
    pristine = None
    if compared_on_device(backend, array.size, guard):
        pristine = backend.alloc(array.size)
        backend.device_copy(pristine, inner, array.size * 4)
    return GuardedBuffer(whole, inner, guard, array.size, array, pristine)


def compared_on_device(backend: Backend, count: int, guard: int) -> bool:
    """Whether an input of `count` floats gets a device copy for its check."""
    return guard > 0 and (count >= DEVICE_COMPARE_MIN_FLOATS
                          or bool(getattr(backend, "compares_small_inputs", False)))


def guarded_alloc(backend: Backend, count: int, row_floats: int,
                  guarded: bool = True) -> GuardedBuffer:
    count = max(1, count)
    guard = guard_floats(row_floats) if guarded else 0
    staged = _staged.pop(_alloc_key(backend, count, guard), None)
    if staged is not None:
        return staged
    whole = _sentinelled(backend, count, guard, None)
    inner = backend.view(whole, guard, count) if guard else whole
    return GuardedBuffer(whole, inner, guard, count)


def stage_upload(backend: Backend, array: np.ndarray, row_floats: int) -> None:
    """`guarded_upload(backend, array, row_floats)` now, for the job that will ask for it."""
    guard = guard_floats(row_floats)
    if _upload_key(backend, array, guard) not in _staged:
        _staged[_upload_key(backend, array, guard)] = guarded_upload(backend, array, row_floats)


def stage_alloc(backend: Backend, count: int, row_floats: int) -> None:
    """`guarded_alloc(backend, count, row_floats)` now, for the job that will ask for it."""
    count, guard = max(1, count), guard_floats(row_floats)
    if _alloc_key(backend, count, guard) not in _staged:
        _staged[_alloc_key(backend, count, guard)] = guarded_alloc(backend, count, row_floats)


def drop_staged() -> None:
    """Let go of staged buffers no job took (the job they were for was refused, reused an
    earlier measurement, or failed before its uploads)."""
    _staged.clear()


def _first(indices: np.ndarray) -> int:
    return int(indices[0])


def violation(backend: Backend, name: str, buffer: GuardedBuffer,
              whole: bool = False) -> Optional[str]:
    """What the kernel did outside `buffer` (or to it, for an input), or None. `whole`: the
    allocation comes to the host in one copy (an output whose values are checked next; then
    `backend` needs only `download`), as does an input with no device copy; else only its
    guards do."""
    guard, count = buffer.guard, buffer.count
    inner = None
    if whole or not guard or (buffer.original is not None and buffer.pristine is None):
        bits = backend.download(buffer.whole, (guard * 2 + count,)).view(np.uint32)
        head, tail, inner = bits[:guard], bits[guard + count:], bits[guard:guard + count]
    else:
        head = backend.download_range(buffer.whole, 0, guard).view(np.uint32)
        tail = backend.download_range(buffer.whole, guard + count, guard).view(np.uint32)
    before = np.flatnonzero(head != SENTINEL_BITS)
    after = np.flatnonzero(tail != SENTINEL_BITS)
    if after.size:
        return (f"wrote {after.size} floats past the end of {name} (first at element "
                f"{count + _first(after)}, {name} has {count})")
    if before.size:
        return (f"wrote {before.size} floats before the start of {name} (first at element "
                f"{_first(before) - guard})")
    if buffer.original is not None:
        if inner is None:  # compared on the device; downloaded only to say where it changed
            if backend.count_differences(buffer.inner, buffer.pristine, count) == 0:
                return None
            inner = backend.download_range(buffer.whole, guard, count).view(np.uint32)
        changed = np.flatnonzero(inner != buffer.original.ravel().view(np.uint32))
        if changed.size:
            return (f"changed input {name} ({changed.size} of its {buffer.count} elements, "
                    f"first at element {_first(changed)})")
    return None
