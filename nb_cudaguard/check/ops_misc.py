"""Counting and bookkeeping ops with a device assert: ``bincount``, ``repeat_interleave``, ``segment_reduce``,
grouped GEMM offsets, and ``torch._assert_async`` (which several ops use to check a condition on the GPU).
"""

from __future__ import annotations

from typing import Any

import torch

from nb_cudaguard.check.conditions import CastTracker, Condition, as_stats, non_negative, offsets_out_of_order, usable

_FIX_COUNTS = "Counts, lengths and repeats must be non-negative integers."


def check_bincount(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    return mode.cast_conditions("self", a["self"]) + non_negative(
        "self", a["self"], "other", "torch.bincount", fix="bincount counts non-negative integers: shift or filter them."
    )


def check_repeat_interleave(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    """Repeats non-negative (Repeat.cu); for the plain ``repeat_interleave(repeats, output_size=N)`` form, N must
    be their sum. The ``self``/``dim`` forms broadcast a single repeat, so only the sign is checked there."""
    repeats, output_size = a["repeats"], a.get("output_size")
    if not isinstance(repeats, torch.Tensor):
        return []
    conditions = non_negative("repeats", repeats, "other", "torch.repeat_interleave", fix=_FIX_COUNTS)
    if output_size is not None and "self" not in a and usable(repeats):
        total = repeats.sum().reshape(1).to(torch.float64)
        expected = int(output_size)
        conditions.append(
            Condition(
                argument="output_size",
                tensor=repeats,
                family="other",
                stats=total,
                passes=lambda s: s[0] == expected,
                bad_mask=lambda: torch.ones_like(repeats, dtype=torch.bool),
                problem=f"is {expected} but the repeats sum to a different total",
                valid_range="repeats.sum()",
                range_source="repeats",
                fix="Pass output_size=int(repeats.sum()) or leave it out.",
            )
        )
    return conditions


def check_segment_reduce(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    lengths = a.get("lengths")
    if lengths is None:
        return []
    return non_negative("lengths", lengths, "other", "torch.segment_reduce", fix=_FIX_COUNTS)


def check_assert_async(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t = a["self"]
    if not usable(t):
        return []
    message = a.get("assert_msg") or "Expected Tensor with single nonzero value, but got zero"
    family = "multinomial_invalid_probs" if "multinomial" in message or "probability" in message else "other"
    return [
        Condition(
            argument="self",
            tensor=t,
            family=family,
            stats=(t != 0).all().reshape(1).to(torch.float64),
            passes=lambda s: s[0] == 1,
            bad_mask=lambda: t == 0,
            problem=f"is zero: the asynchronous assert '{message}' would fail on the GPU",
            valid_range="non-zero",
            range_source="torch._assert_async",
            fix="The condition asserted by this op is false; fix the value it checks.",
        )
    ]


def check_grouped_mm(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    """``offs``: non-decreasing, non-negative, ending within the grouped dimension (GroupMMCommon.cuh)."""
    mat_a, mat_b, offs = a["self"], a["mat2"], a.get("offs")
    if offs is None or not usable(offs) or offs.dim() != 1:
        return []
    limit, source = grouped_limit(mat_a, mat_b)
    first = offs[:1]
    steps = offs[1:] - offs[:-1] if offs.numel() > 1 else first - first
    stats = as_stats(first.min(), steps.min(), offs.max())

    def bad_mask():
        return offsets_out_of_order(offs, limit)

    return [
        Condition(
            argument="offs",
            tensor=offs,
            family="other",
            stats=stats,
            passes=lambda s: s[0] >= 0 and s[1] >= 0 and s[2] <= limit,
            bad_mask=bad_mask,
            problem="has {count} offset(s) that decrease or pass the grouped dimension",
            valid_range=f"non-decreasing, within [0, {limit}]",
            range_source=source,
            fix="offs are the cumulative end of each group: non-decreasing and at most the grouped dimension's size.",
        )
    ]


def grouped_limit(mat_a: Any, mat_b: Any) -> tuple[int, str]:
    """The size ``offs`` of a grouped matmul may reach, and where it comes from (GroupMMCommon.cuh)."""
    if mat_a.dim() == 2 and mat_b.dim() == 2:
        return mat_a.size(1), "self.shape[1] (K)"
    if mat_a.dim() == 2:
        return mat_a.size(0), "self.shape[0] (rows of the grouped input)"
    return mat_b.size(-1), "mat2.shape[-1] (columns of the grouped input)"
