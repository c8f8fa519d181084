"""Folding many held checks into a board at once, with a fixed number of tensor ops whatever their number.

The board keeps the first check that fired (``fast.board``); folding the held checks one by one would cost about ten
small tensor ops each. Here a device's held checks are folded together: their masks already lie one after another in
the device's mask buffer (in call order), so a ``max`` over them finds the first offending element in call order
(``max`` over a boolean returns the first True); which check it belongs to, where that check starts and its tag are
looked up in small tensors that depend only on the batch's shape (each check's tag, size and input dtype), which a
training loop repeats every step, so they are made once per distinct batch (:class:`Layouts`), on the device, with
fills: never a host copy, never a sync. The inputs are flattened (one copy per input dtype) to read the value there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

_BASE = torch._C.TensorBase  # its methods are not the checked entry points (``fast.entries``)

Held = tuple[float, Any, int]  # (the check's tag: site * TAG_UNIT, + STALE if its input changed; input; numel)


@dataclass
class Layout:
    """One batch's shape on the device: which check each element belongs to, where each check starts, each check's
    tag, and how the inputs are flattened (by dtype; ``permutation`` puts the grouped values back in call order when
    there are several dtypes)."""

    groups: list[list[int]]  # indices into the batch, by input dtype, in call order within a group
    check_of: Any  # int64 per element, call order: the index of its check
    starts: Any  # int64 per check: its first element
    tags: Any  # float64 per check
    permutation: Any | None  # int64 per element: where the call-order element lies among the grouped values


class Layouts:
    """The layouts of the batches seen lately, by device and each check's (tag, size, dtype)."""

    LIMIT = 16

    def __init__(self) -> None:
        self._by_key: dict[tuple, Layout] = {}

    def get(self, device, held: list[Held]) -> Layout:
        key = (device, *((tag, n, x.dtype) for tag, x, n in held))
        found = self._by_key.get(key)
        if found is None:
            if len(self._by_key) >= self.LIMIT:
                del self._by_key[next(iter(self._by_key))]
            found = self._by_key[key] = _layout(device, held)
        return found


def _fills(values: Sequence[float], sizes: Sequence[int], dtype, device) -> Any:
    """``values[i]`` repeated ``sizes[i]`` times, made on the device."""
    return torch.cat([torch.full((n,), v, dtype=dtype, device=device) for v, n in zip(values, sizes, strict=True)])


def _layout(device, held: list[Held]) -> Layout:
    by_dtype: dict[Any, list[int]] = {}
    for index, (_, x, _) in enumerate(held):
        by_dtype.setdefault(x.dtype, []).append(index)
    groups = list(by_dtype.values())
    sizes = [n for _, _, n in held]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    permutation = None
    if len(groups) > 1:
        grouped, at = {}, 0
        for group in groups:
            for i in group:
                grouped[i], at = at, at + sizes[i]
        permutation = torch.cat([torch.arange(grouped[i], grouped[i] + n, device=device) for i, n in enumerate(sizes)])
    return Layout(
        groups,
        _fills(list(range(len(held))), sizes, torch.int64, device),
        _fills(starts, [1] * len(held), torch.int64, device),
        _fills([tag for tag, _, _ in held], [1] * len(held), torch.float64, device),
        permutation,
    )


def fold_batch(state, masks, held: list[Held], layouts: Layouts) -> None:
    """Fold a device's held checks into its board ``state`` as folding them one by one in call order would.
    ``masks``: their masks one after another in call order (bool, one per element)."""
    if masks.numel() == 0:
        return
    layout = layouts.get(state.device, held)
    flatten, gather = torch._C._nn.flatten_dense_tensors, _BASE.gather
    first = masks.max(0)[1].reshape(1)  # the first element that fired (0 if none did)
    check = gather(layout.check_of, 0, first)
    count = masks.logical_and(layout.check_of.eq(check)).sum()  # 0: none fired
    position = first - gather(layout.starts, 0, check)
    if layout.permutation is None:
        value = gather(flatten([x for _, x, _ in held]), 0, first)
    else:
        values = [_BASE.to(flatten([held[i][1] for i in group]), torch.float64) for group in layout.groups]
        value = gather(torch.cat(values), 0, gather(layout.permutation, 0, first))
    tag = gather(layout.tags, 0, check)
    record = torch.cat([count.reshape(1).double(), _BASE.to(value, torch.float64), position.double(), tag])
    torch.where(count > state.select(0, 3), record, state, out=state)
