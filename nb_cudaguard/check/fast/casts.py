"""NaN or inf cast to an index, the fast way: remember float -> integer casts, check the source at the index's use.

CUDA turns NaN into 0 without a word, so a range check of the index alone misses it. As in the exact mode, a cast
is only an error once its result is used as an index: the casts (``Tensor.long``, ``Tensor.int``, ``Tensor.to``)
are remembered by the result's identity, with the floating source (kept if small, weakly if large, and then with
its finiteness reduced at the cast on its own device, nothing read back). When an index argument is one of those
results, or a view of one, :func:`check_cast` folds ``~isfinite(source)`` into the board, aligned with the index
through the view's strides. Eager only: under ``torch.compile`` tensor methods are not traced through Python.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from nb_cudaguard.check.fast.rules import _fold, compiling, plain
from nb_cudaguard.check.fast.sites import SITES, Rule

_INDEX_DTYPES = (torch.int64, torch.int32)
_KEEP_SOURCE = 1 << 20  # elements: smaller sources are kept alive with their index, to show the NaN itself


class Casts:
    """Integer tensors made from floating ones while the fast checks were on."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[Any], Callable[[], Any], Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def clear(self) -> None:
        self._by_id.clear()

    def record(self, result, source) -> None:
        key = id(result)

        def forget(ref, key=key) -> None:
            entry = self._by_id.get(key)
            if entry is not None and entry[0] is ref:
                del self._by_id[key]

        if source.numel() <= _KEEP_SOURCE:
            finite = None
            ref: Callable[[], Any] = lambda: source  # noqa: E731  (kept: usually a temporary like (p * n))
        else:
            finite = torch.isfinite(source).all()
            ref = weakref.ref(source)
        self._by_id[key] = (weakref.ref(result, forget), ref, finite)

    def lookup(self, t) -> tuple[Any, Any, Any] | None:
        """(the cast result ``t`` is, or views; its source or None; the finiteness flag or None)."""
        for candidate in (t, t._base):
            if candidate is None:
                continue
            entry = self._by_id.get(id(candidate))
            if entry is not None and entry[0]() is candidate:
                return candidate, entry[1](), entry[2]
        return None


CASTS = Casts()


def track(result, source) -> None:
    """Called by the cast wrappers: remember ``result`` if it is an integer index made from a float tensor, or a
    device move of one (which keeps its provenance)."""
    if not isinstance(result, torch.Tensor) or result is source or result.dtype not in _INDEX_DTYPES:
        return
    if not plain(source):
        return
    if source.is_floating_point():
        floating = source
    else:
        found = CASTS.lookup(source)
        if found is None or found[0] is not source or found[1] is None:
            return
        floating = found[1]
    if floating.device != result.device:
        floating = floating.to(result.device)
    CASTS.record(result, floating)


def check_cast(op: str, argument: str, index) -> None:
    """Fold "this index came from NaN/inf" for ``index`` if it was cast under the checks."""
    if not CASTS._by_id or compiling() or not plain(index):
        return
    found = CASTS.lookup(index)
    if found is None:
        return
    base, source, finite = found

    def rule() -> Rule:
        return Rule(
            op=op,
            argument=argument,
            family="nan_or_inf",
            valid_range="finite values before the cast",
            range_source="the float -> integer cast that produced it",
        )

    site = SITES.here((op, argument, "nan_or_inf"), index, make_rule=rule)
    if source is not None and source.stride() == base.stride() and source.shape == base.shape:
        offset = source.storage_offset() + index.storage_offset() - base.storage_offset()
        aligned = source.as_strided(index.size(), index.stride(), offset)  # the same view of the source
        _fold(site, aligned, torch.isfinite(aligned).logical_not())
    elif finite is not None:  # the source is gone: only the flag taken at the cast is left
        _fold(site, finite.reshape(1).to(torch.float64), finite.logical_not().reshape(1))
