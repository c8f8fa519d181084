"""The one table of the fast mode: which Python entry point of torch gets which fast check.

The fast mode attaches its checks to the entry points users reach assert-prone kernels through (functions of
``torch``, ``torch.nn.functional`` and ``torch._C._nn``, methods of ``torch.Tensor``), and to nothing else: every
other op runs exactly as without the checks, with no Python on its path. ``docs/guard.md`` says why this level and
not the dispatcher's. While the checks are on, each entry point is replaced by a small wrapper that calls the
check (which returns the arguments with safe values) and then the original; :func:`install` and
:func:`uninstall` put them in place and back, restoring exactly what was there (an inherited method is deleted
again rather than copied onto the class).

A wrapper keeps its own ``__module__`` and ``__name__``: Dynamo inlines a function it does not know as torch's, so
a ``torch.compile``'d model that calls ``F.embedding`` traces the check into its graph; and FX, which re-imports a
torch function by its qualified name when it generates code, then reaches the wrapper with fake tensors, which it
passes through (``fast.rules.plain``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from nb_cudaguard.check.fast import checks_index as index
from nb_cudaguard.check.fast import checks_misc as misc
from nb_cudaguard.check.fast import checks_nn as nn
from nb_cudaguard.check.fast.board import BOARD
from nb_cudaguard.check.fast.casts import track

Check = Callable[[str, tuple, dict], tuple[tuple, dict]]

_T = torch.Tensor
_F = torch.nn.functional
_NN = torch._C._nn

_ALONG_DIM: dict[str, Check] = {
    **dict.fromkeys(
        ["gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"],
        index.along_dim("gather_scatter_index", negative_ok=False),
    ),
    **dict.fromkeys(
        ["index_select", "index_add", "index_add_", "index_copy", "index_copy_", "index_reduce", "index_reduce_"],
        index.along_dim("advanced_index_out_of_bounds", negative_ok=False),
    ),
    **dict.fromkeys(["index_fill", "index_fill_"], index.along_dim("advanced_index_out_of_bounds", negative_ok=True)),
}
_BOTH: dict[str, Check] = {  # torch.<name> and Tensor.<name>
    **_ALONG_DIM,
    "take": index.flat_index,
    "index_put": index.index_put,
    "masked_scatter": index.masked_scatter,
    "multinomial": misc.multinomial,
    "bernoulli": misc.bernoulli,
    "bincount": misc.bincount,
    "repeat_interleave": misc.repeat_interleave,
}
_TENSOR_ONLY: dict[str, Check] = {
    "put": index.flat_index,
    "put_": index.flat_index,
    "index_put_": index.index_put,
    "masked_scatter_": index.masked_scatter,
    "bernoulli_": misc.bernoulli,
    "__getitem__": index.getitem,
    "__setitem__": index.getitem,
}
_TORCH_ONLY: dict[str, Check] = {
    "poisson": misc.poisson,
    "segment_reduce": misc.segment_reduce,
    "_assert_async": misc.assert_async,
    "_grouped_mm": misc.grouped_mm,
}
_FUNCTIONAL: dict[str, Check] = {
    "embedding": nn.embedding,
    "embedding_bag": nn.embedding_bag,
    "cross_entropy": nn.class_target,
    "nll_loss": nn.class_target,
    "multi_margin_loss": nn.margin_target,
    "binary_cross_entropy": nn.binary_cross_entropy,
    "one_hot": nn.one_hot,
    "ctc_loss": nn.ctc_loss,
}
_NN_ONLY: dict[str, Check] = {"max_unpool2d": index.max_unpool, "max_unpool3d": index.max_unpool}


@dataclass(frozen=True)
class Entry:
    owner: Any
    name: str
    label: str  # how the error names the op: ``F.embedding``, ``Tensor.gather``, ``torch.take``
    check: Check


def _entries() -> list[Entry]:
    found = [Entry(torch, n, f"torch.{n}", c) for n, c in {**_BOTH, **_TORCH_ONLY}.items()]
    found += [Entry(_T, n, f"Tensor.{n}", c) for n, c in {**_BOTH, **_TENSOR_ONLY}.items()]
    found += [Entry(_F, n, f"F.{n}", c) for n, c in _FUNCTIONAL.items()]
    found += [Entry(_NN, n, f"F.{n}", c) for n, c in _NN_ONLY.items()]
    return [e for e in found if getattr(e.owner, e.name, None) is not None]


ENTRIES = _entries()
_CASTS = ("long", "int", "to")


def _checked(entry: Entry, original: Callable) -> Callable:
    check, label = entry.check, entry.label

    def checked(*args, **kwargs):
        if BOARD.active and not BOARD.suspended:
            args, kwargs = check(label, args, kwargs)
        return original(*args, **kwargs)

    checked.__doc__ = original.__doc__
    checked.__wrapped__ = original  # type: ignore[attr-defined]
    return checked


def _cast(original: Callable) -> Callable:
    """``Tensor.long/int/to``: remember float -> integer casts (NaN or inf as an index is caught where used)."""

    def cast(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if BOARD.active and not BOARD.suspended and result.dtype != self.dtype:
            track(result, self)
        return result

    cast.__doc__ = original.__doc__
    cast.__wrapped__ = original  # type: ignore[attr-defined]
    return cast


class Patches:
    """The wrappers in place: (owner, name, what was there, whether it was the owner's own attribute)."""

    def __init__(self) -> None:
        self.installed: list[tuple[Any, str, Any, bool, Any]] = []

    def install(self) -> None:
        if self.installed:
            return
        for entry in ENTRIES:
            original = getattr(entry.owner, entry.name)
            self._put(entry.owner, entry.name, original, _checked(entry, original))
        for name in _CASTS:
            original = getattr(_T, name)
            self._put(_T, name, original, _cast(original))

    def _put(self, owner: Any, name: str, original: Any, wrapper: Any) -> None:
        own = name in vars(owner)
        setattr(owner, name, wrapper)
        self.installed.append((owner, name, original, own, wrapper))

    def uninstall(self) -> list[str]:
        """Put every original back; an entry point the user replaced meanwhile is left as they set it."""
        left = []
        for owner, name, original, own, wrapper in reversed(self.installed):
            if getattr(owner, name, None) is not wrapper:
                left.append(f"{getattr(owner, '__name__', owner)}.{name}")
                continue
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self.installed = []
        return left


PATCHES = Patches()
