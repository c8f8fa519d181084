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

LIMIT = 16  # entries kept; a new one past it drops the oldest
ELEMENTS = 1 << 16  # larger tensors are not kept: each entry holds its safe values
_STRIDED = torch.strided  # a sparse index has no storage to compare


class Known:
    """Checked index tensors by (base, geometry, range): each with its version, data pointer and safe values."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, tuple[Any, int, int, Any]] = {}
        self.skipped = 0  # checks found here since the process started (the benchmarks read it)

    def clear(self) -> None:
        self._by_key.clear()

    def safe(self, x, low: int, high: int, ignore: int | None) -> Any:
        """The safe values the same check of the same unchanged ``x`` made, or None."""
        if x.layout is not _STRIDED:
            return None
        base = x._base
        owner = x if base is None else base
        entry = self._by_key.get((id(owner), x.storage_offset(), x.shape, x.stride(), x.dtype, low, high, ignore))
        if (
            entry is None
            or entry[0]() is not owner
            or entry[1] != x._version
            or entry[2] != x.data_ptr()
            or not x.untyped_storage().resizable()
        ):
            return None
        self.skipped += 1
        return entry[3]

    def remember(self, x, low: int, high: int, ignore: int | None, safe) -> None:
        """Keep ``safe`` as the check of ``x`` against this range (small tensors with a version counter). Whose
        memory it is, is asked when it is found again (:meth:`safe`), not here: asking makes a Python object for
        the tensor's storage, which then costs about 10 µs when the tensor is freed, every step for a loader's new
        batch (measured in a checked loop of fresh tensors)."""
        if x.numel() > ELEMENTS or x.is_inference():
            return
        base = x._base
        owner = x if base is None else base
        if len(self._by_key) >= LIMIT:
            del self._by_key[next(iter(self._by_key))]
        key = (id(owner), x.storage_offset(), x.shape, x.stride(), x.dtype, low, high, ignore)
        self._by_key[key] = (weakref.ref(owner), x._version, x.data_ptr(), safe)


KNOWN = Known()
