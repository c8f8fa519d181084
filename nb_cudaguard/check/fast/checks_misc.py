"""Fast checks of sampling and counting entry points: multinomial, bernoulli, poisson, bincount,
repeat_interleave, segment_reduce, ``torch._assert_async`` and the grouped GEMM's offsets (``ops_sampling`` and
``ops_misc`` in the exact mode).
"""

from __future__ import annotations

import torch

from nb_cudaguard.check.fast.args import Args, arg, site_of, with_arg
from nb_cudaguard.check.fast.casts import check_cast
from nb_cudaguard.check.fast.rules import (
    distribution_rows,
    integral,
    monotone_offsets,
    non_negative,
    nonzero_condition,
    plain,
    sums_to,
    unit_interval,
)
from nb_cudaguard.check.ops_misc import grouped_limit

_FIX_BERNOULLI = "Bernoulli probabilities must lie in [0, 1]: use torch.sigmoid on logits and check for NaN."
_FIX_COUNTS = "Counts, lengths and repeats must be non-negative integers."


def multinomial(label: str, args: tuple, kwargs: dict) -> Args:
    probs = args[0]
    if not plain(probs) or not probs.is_floating_point():
        return args, kwargs
    site = site_of(
        label,
        "input",
        "multinomial_invalid_probs",
        probs,
        "finite, >= 0, each row summing to > 0",
        "torch.multinomial",
    )
    return (distribution_rows(site, probs), *args[1:]), kwargs


def bernoulli(label: str, args: tuple, kwargs: dict) -> Args:
    """``bernoulli(p)`` samples with probabilities ``self``; ``bernoulli_(p)`` with a tensor ``p``; a float ``p``
    is checked on the host by torch itself."""
    p = arg(args, kwargs, 1, "p")
    if p is None and "_" not in label.rsplit(".", 1)[-1]:
        position, name, p = 0, "input", args[0]
    elif isinstance(p, torch.Tensor):
        position, name = 1, "p"
    else:
        return args, kwargs
    if not plain(p) or not p.is_floating_point():
        return args, kwargs
    site = site_of(label, "p", "other", p, "[0, 1]", label, _FIX_BERNOULLI)
    return with_arg(args, kwargs, position, name, unit_interval(site, p))


def poisson(label: str, args: tuple, kwargs: dict) -> Args:
    rates = args[0]
    if not plain(rates) or not rates.is_floating_point():
        return args, kwargs
    fix = "Poisson rates must be >= 0 and not NaN (e.g. clamp_min(0))."
    site = site_of(label, "rates", "other", rates, ">= 0", "torch.poisson", fix)
    return (non_negative(site, rates), *args[1:]), kwargs


def bincount(label: str, args: tuple, kwargs: dict) -> Args:
    values = args[0]
    if not integral(values):
        return args, kwargs
    check_cast(label, "self", values)
    fix = "bincount counts non-negative integers: shift or filter them."
    site = site_of(label, "self", "other", values, ">= 0", "torch.bincount", fix)
    return (non_negative(site, values), *args[1:]), kwargs


def repeat_interleave(label: str, args: tuple, kwargs: dict) -> Args:
    """Repeats non-negative; in the plain ``repeat_interleave(repeats, output_size=N)`` form, N is their sum."""
    plain_form = len(args) == 1 and "repeats" not in kwargs and not label.startswith("Tensor")
    position = 0 if plain_form else 1
    repeats = arg(args, kwargs, position, "repeats")
    if not integral(repeats):
        return args, kwargs
    site = site_of(label, "repeats", "other", repeats, ">= 0", "torch.repeat_interleave", _FIX_COUNTS)
    safe = non_negative(site, repeats)
    output_size = kwargs.get("output_size")
    if plain_form and output_size is not None and safe.dim() == 1:
        site = site_of(
            label,
            "output_size",
            "other",
            repeats,
            "repeats.sum()",
            "repeats",
            "Pass output_size=int(repeats.sum()) or leave it out.",
        )
        safe = sums_to(site, safe, int(output_size))
    return with_arg(args, kwargs, position, "repeats", safe)


def segment_reduce(label: str, args: tuple, kwargs: dict) -> Args:
    """Lengths non-negative. Without ``unsafe=True`` torch checks them on the host itself and raises; the board
    still names the variable. With it the kernel would read out of bounds, so they are made safe."""
    lengths = kwargs.get("lengths")
    if not integral(lengths):
        return args, kwargs
    site = site_of(label, "lengths", "other", lengths, ">= 0", "torch.segment_reduce", _FIX_COUNTS)
    safe = non_negative(site, lengths)
    return (args, {**kwargs, "lengths": safe}) if kwargs.get("unsafe") else (args, kwargs)


def assert_async(label: str, args: tuple, kwargs: dict) -> Args:
    condition = args[0]
    if not plain(condition):
        return args, kwargs
    message = arg(args, kwargs, 1, "assert_msg") or "Expected Tensor with single nonzero value, but got zero"
    family = "multinomial_invalid_probs" if "multinomial" in message or "probability" in message else "other"
    site = site_of(
        label,
        "self",
        family,
        condition,
        "non-zero",
        "torch._assert_async",
        "The condition asserted by this op is false; fix the value it checks.",
    )
    return (nonzero_condition(site, condition), *args[1:]), kwargs


def grouped_mm(label: str, args: tuple, kwargs: dict) -> Args:
    """``offs``: non-decreasing, non-negative, ending within the grouped dimension (GroupMMCommon.cuh)."""
    mat_a, mat_b, offs = args[0], arg(args, kwargs, 1, "mat2"), arg(args, kwargs, 2, "offs")
    if not integral(offs) or offs.dim() != 1 or not plain(mat_a) or not plain(mat_b):
        return args, kwargs
    limit, source = grouped_limit(mat_a, mat_b)
    fix = "offs are the cumulative end of each group: non-decreasing and at most the grouped dimension's size."
    site = site_of(label, "offs", "other", offs, f"non-decreasing, within [0, {limit}]", source, fix)
    return with_arg(args, kwargs, 2, "offs", monotone_offsets(site, offs, limit))
