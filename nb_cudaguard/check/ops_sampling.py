"""Random sampling: ``multinomial``'s probabilities (finite, non-negative, no empty row), ``bernoulli``'s in
[0, 1], ``poisson``'s rates non-negative.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from nb_cudaguard.check.conditions import (
    CastTracker,
    Condition,
    minmax,
    non_negative,
    probabilities_in_unit_interval,
    read_kinds,
    usable,
)

_FIX_BERNOULLI = "Bernoulli probabilities must lie in [0, 1]: use torch.sigmoid on logits and check for NaN."


def check_multinomial(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    """No NaN, inf or negative entry, and every row sums to more than zero (summed in float32 at least)."""
    probs = a["self"]
    if not usable(probs) or not probs.is_floating_point():
        return []
    acc = torch.float64 if probs.dtype == torch.float64 else torch.float32
    rows = probs.sum(-1, dtype=acc)
    stats = torch.cat([minmax(probs), minmax(rows)])

    def bad_mask():
        bad = ~(torch.isfinite(probs) & (probs >= 0))
        if not bool(bad.any()):  # only empty rows: point at the rows
            bad = (rows <= 0).unsqueeze(-1).expand(probs.shape).clone()
        return bad

    return [
        Condition(
            argument="input",
            tensor=probs,
            family="multinomial_invalid_probs",
            stats=stats,
            passes=lambda s: s[0] >= 0 and s[1] < math.inf and s[2] > 0 and s[3] < math.inf,
            bad_mask=bad_mask,
            problem="has {count} NaN, inf or negative value(s), or rows that sum to 0",
            worded=lambda: _multinomial_read(probs, rows),
            valid_range="finite, >= 0, each row summing to > 0",
            range_source="torch.multinomial",
        )
    ]


def _multinomial_read(probs, rows) -> str:
    """What the probabilities held, as read: the kinds of bad entry found, else the rows that sum to 0."""
    bad = probs[~(torch.isfinite(probs) & (probs >= 0))]
    if bad.numel():
        return read_kinds(bad, "that are not finite and >= 0")
    return f"has {int((rows <= 0).sum())} row(s) that sum to 0"


def check_bernoulli(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    """``torch.bernoulli(p)`` samples with probabilities ``self``; ``bernoulli_(p)`` with a tensor ``p``. A float
    ``p`` is checked on the host by torch itself."""
    if "p" not in a:
        return probabilities_in_unit_interval("p", a["self"], "other", "torch.bernoulli", fix=_FIX_BERNOULLI)
    if isinstance(a["p"], torch.Tensor):
        return probabilities_in_unit_interval("p", a["p"], "other", "Tensor.bernoulli_", fix=_FIX_BERNOULLI)
    return []


def check_poisson(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    return non_negative(
        "rates", a["self"], "other", "torch.poisson", fix="Poisson rates must be >= 0 and not NaN (e.g. clamp_min(0))."
    )
