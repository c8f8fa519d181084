"""Indexing ops: each index within the dimension it indexes, with the wrap-around rule of that op.

``x[i]``, ``take`` and ``index_fill`` accept negative indices (``[-size, size)``); ``index_select``, the
``index_*`` family, gather and scatter do not (``[0, size)``). ``F.one_hot`` reaches the GPU as a scatter and is
recognised here; ``masked_scatter`` and ``max_unpool`` index through a mask and a pooling's indices.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nb_cudaguard.check.conditions import CastTracker, Condition, dim_size, index_in_range, non_negative, usable


def check_index_select(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t, dim, index = a["self"], a["dim"], a["index"]
    if t.is_sparse:
        return []
    return mode.cast_conditions("index", index) + index_in_range(
        "index", index, 0, dim_size(t, dim), "advanced_index_out_of_bounds", f"self.shape[{dim}]"
    )


def _dim_checks(
    mode: CastTracker, argument: str, index, size: int, dim: int, negative_ok: bool, family: str
) -> list[Condition]:
    low = -size if negative_ok else 0
    return mode.cast_conditions(argument, index) + index_in_range(
        argument, index, low, size, family, f"self.shape[{dim}]"
    )


def check_index_dim(mode: CastTracker, a: dict[str, Any], negative_ok: bool = False) -> list[Condition]:
    """index_add / index_copy / index_reduce (``[0, size)``) and index_fill (``[-size, size)``)."""
    t, dim, index = a["self"], a["dim"], a["index"]
    return _dim_checks(mode, "index", index, dim_size(t, dim), dim, negative_ok, "advanced_index_out_of_bounds")


def check_index_fill(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    return check_index_dim(mode, a, negative_ok=True)


def check_advanced_index(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    """``x[i, j]`` and ``x[i] = v``: each integer index tensor within [-size, size) of the dim it indexes."""
    t, indices = a["self"], a["indices"]
    conditions: list[Condition] = []
    dim = 0
    for position, index in enumerate(indices):
        if index is None:
            dim += 1
            continue
        if index.dtype in (torch.bool, torch.uint8):  # a mask covers as many dims as it has; its shape is host-checked
            dim += max(index.dim(), 1)
            continue
        size = dim_size(t, dim)
        argument = f"indices[{position}]"
        conditions += mode.cast_conditions(argument, index)
        conditions += index_in_range(argument, index, -size, size, "advanced_index_out_of_bounds", f"self.shape[{dim}]")
        dim += 1
    return conditions


def check_take(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t, index = a["self"], a["index"]
    n = t.numel()
    return mode.cast_conditions("index", index) + index_in_range(
        "index", index, -n, n, "advanced_index_out_of_bounds", "self.numel()"
    )


def check_gather_scatter(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t, dim, index = a["self"], a["dim"], a["index"]
    labels = one_hot_labels(t, dim, index, a.get("value"))
    if labels is not None:
        return check_one_hot(mode, {"self": labels, "num_classes": t.size(-1)})
    return _dim_checks(mode, "index", index, dim_size(t, dim), dim, False, "gather_scatter_index")


def one_hot_labels(t, dim, index, value):
    """The labels, if this scatter is ``F.one_hot`` on CUDA: ``Onehot.cpp`` skips its host checks there ("rely on
    device assert thrown by scatter") and runs ``zeros(shape + [C]).scatter_(-1, labels.unsqueeze(-1), 1)``."""
    if dim != -1 or value is None or value != 1 or t.dtype != torch.int64 or index.dtype != torch.int64:
        return None
    if index._base is None or index.shape[-1:] != (1,) or t.shape[:-1] != index.shape[:-1]:
        return None
    base = index._base  # the user's labels themselves, unless they were a view already
    return base if base.shape == index.shape[:-1] else index.squeeze(-1)


def check_one_hot(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    labels, classes = a["self"], int(a.get("num_classes", -1))
    if classes < 0:
        return mode.cast_conditions("input", labels) + non_negative(
            "input", labels, "one_hot_num_classes", "num_classes=-1 (inferred from the largest label)"
        )
    return mode.cast_conditions("input", labels) + index_in_range(
        "input", labels, 0, classes, "one_hot_num_classes", f"num_classes = {classes}"
    )


def check_masked_scatter(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t, mask, source = a["self"], a["mask"], a["source"]
    if not usable(mask) or not usable(t):
        return []
    shape = torch.broadcast_shapes(t.shape, mask.shape)
    available = source.numel()
    selected = mask.expand(shape).sum().reshape(1).to(torch.float64)
    return [
        Condition(
            argument="mask",
            tensor=mask,
            family="other",
            stats=selected,
            passes=lambda s: s[0] <= available,
            bad_mask=lambda: mask,
            problem="selects {count} element(s), more than source has " + f"({available})",
            valid_range=f"at most {available} True elements",
            range_source="source.numel()",
            fix="masked_scatter needs source.numel() >= mask.sum(): check the mask and the source's size.",
        )
    ]


def check_max_unpool(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    indices, output_size = a["indices"], [int(s) for s in a["output_size"]]
    plane = math.prod(output_size)
    return index_in_range(
        "indices",
        indices,
        0,
        plane,
        "advanced_index_out_of_bounds",
        f"output_size {tuple(output_size)}",
        fix="Pass the indices returned by the matching max_pool call (return_indices=True) and its input's size.",
    )
