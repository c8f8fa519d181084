"""Index tensors already checked: the same tensor, unchanged, checked against the same range again is not checked
again; the op gets the safe values the first check made.

A model passes some index tensors to the same ops step after step without changing them: a transformer's
``position_ids`` and ``token_type_ids`` buffers (a new view of the same buffer every forward), a batch reused while
debugging, a fixed evaluation set. Checking one again finds what the first check found, so it costs a launch and
a hold for nothing. Why skipping is exact and not a guess:

* *The same values.* The entry is the same tensor (or a view of the same base with the same offset, shape, strides
  and dtype; the base is held weakly and compared by identity, so a new tensor at a reused address never matches),
  with the same version counter (every in-place change, through a view too, bumps it), the same data pointer (so
  ``x.data = other`` is seen) and memory that PyTorch owns (``resizable``: memory shared with NumPy, through
  ``torch.from_numpy`` or ``.numpy()``, is never skipped, because a write through NumPy bumps nothing).
* *The same rule.* The key holds the range and the ignore_index, so another op's range is checked on its own.
* *The same verdict on the board.* The board keeps the first check that fired (``fast.board``), so a second check
  of the same values can only add a firing after one that is already there; and after a read that found nothing,
  the first verdict is known good. A read that found something resets the board, and this table with it
  (:meth:`Known.clear`), as does ``check off``.

What this cannot see: a write that bypasses PyTorch's version counter and keeps the memory's owner (a ``.data``
alias, an array taken with DLPack); autograd does not see those either.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from nb_cudaguard.record.copies import owned_by_torch

LIMIT = 16  # entries kept; a new one past it drops the oldest
ELEMENTS = 1 << 16  # larger tensors are not kept: each entry holds its safe values
SEEN = 1024  # tensors checked once, remembered by identity only
_HELD = object()  # noted as seen while the board holds the tensor: its id cannot be another's until then
_STRIDED = torch.strided  # a sparse index has no storage to compare


class Known:
    """Checked index tensors by (base, geometry, range): each with its version, data pointer and safe values.

    A tensor is kept the second time it is checked, not the first: a loader gives a new batch every step, which is
    never checked again, and keeping it (its geometry, a weak reference) would cost every step for nothing; the first
    time, only that it was seen is noted (``_seen``, by id). By id alone while the board holds the tensor (its check
    waits to be folded, so the tensor is alive and its id is its own): a marker, which costs nothing to make. When
    the board lets go (:meth:`released`), the marks become weak references: the last step's batch is then freed,
    and the next batch, a new tensor object, is usually made at its address; by id alone, 156 of 160 new batches
    of a long loop were taken for the last one, kept, and looked up in vain at their next check (about 15 µs a
    check on its cold path), while a weak reference made at every check cost about as much in short cells.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple, tuple[Any, int, int, Any]] = {}
        self._owners: dict[int, int] = {}  # id of a kept base -> its entries
        self._seen: dict[int, Any] = {}  # id of a base checked once -> _HELD, or a weak reference to it
        self._marked: list[Any] = []  # the bases noted _HELD, to be given weak references when the board lets go
        self.skipped = 0  # checks found here since the process started (the benchmarks read it)

    def clear(self) -> None:
        self._by_key.clear()
        self._owners.clear()
        self._seen.clear()
        self._marked.clear()

    def safe(self, x, low: int, high: int, ignore: int | None) -> Any:
        """The safe values the same check of the same unchanged ``x`` made, or None (at once when nothing is kept:
        then a new batch's check reads nothing of it here)."""
        if not self._owners:
            return None
        base = x._base
        owner = x if base is None else base
        if id(owner) not in self._owners or x.layout is not _STRIDED:
            return None
        entry = self._by_key.get((id(owner), x.storage_offset(), x.shape, x.stride(), x.dtype, low, high, ignore))
        if (
            entry is None
            or entry[0]() is not owner
            or entry[1] != x._version
            or entry[2] != x.data_ptr()
            or not owned_by_torch(x)
        ):
            return None
        self.skipped += 1
        return entry[3]

    def released(self) -> None:
        """The board let go of the checks it held: the tensors noted while it held them may now be freed, and their
        ids taken by new tensors, so each mark becomes a weak reference (one per tensor seen once, made here, in a
        batch, not on each check's path)."""
        seen = self._seen
        for owner in self._marked:
            number = id(owner)
            if seen.get(number) is _HELD:
                seen[number] = weakref.ref(owner)
        self._marked.clear()

    def remember(self, x, low: int, high: int, ignore: int | None, safe, held: bool = False) -> None:
        """Keep ``safe`` as the check of ``x`` against this range, if ``x`` was checked before (small strided
        tensors with a version counter). Whose memory it is, is asked when it is found again (:meth:`safe`), not
        here: asking makes a Python object for the tensor's storage, which then costs about 10 µs when the tensor is
        freed (measured in a checked loop of new tensors)."""
        base = x._base
        owner = x if base is None else base
        number = id(owner)
        seen = self._seen.get(number)
        if seen is None or (seen is not _HELD and seen() is not owner):
            if len(self._seen) >= SEEN:
                self._seen.clear()
                self._marked.clear()
            if held:
                self._seen[number] = _HELD
                self._marked.append(owner)
            else:
                self._seen[number] = weakref.ref(owner)
            return
        if x.layout is not _STRIDED or x.numel() > ELEMENTS or x.is_inference():
            return
        if len(self._by_key) >= LIMIT:
            oldest = next(iter(self._by_key))
            del self._by_key[oldest]
            left = self._owners[oldest[0]] - 1
            if left:
                self._owners[oldest[0]] = left
            else:
                del self._owners[oldest[0]]
        key = (number, x.storage_offset(), x.shape, x.stride(), x.dtype, low, high, ignore)
        if key not in self._by_key:
            self._owners[number] = self._owners.get(number, 0) + 1
        self._by_key[key] = (weakref.ref(owner), x._version, x.data_ptr(), safe)


KNOWN = Known()
