"""What the checks are made of: a Condition on one argument of one op, and the building blocks that make them.

A Condition holds one small reduction of one argument (``stats``: a 1-D tensor, left on the argument's device so
that nothing is copied until the mode reads all of an op's stats back at once), a host-side test of those
numbers, and, for the failure path only, how to find the offending elements. The ranges are the ones the CUDA
kernels assert (``shared/reference/torch_cuda_asserts.json``), which are also the ones the CPU kernels enforce,
so a tensor the checks accept runs unchanged and a tensor they reject would have failed anyway.

A condition's fix is its family's (``families``) unless the op has something more specific to say.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

_LIMIT = 5  # offending values and positions shown

_AMINMAX = getattr(torch, "aminmax", None)


class CastTracker(Protocol):
    """What an op's check asks the dispatch mode: was this index cast from a floating tensor under the checks?"""

    def cast_conditions(self, argument: str, index: Any) -> list[Condition]: ...


@dataclass
class Offenders:
    values: list
    positions: list
    count: int


@dataclass
class Condition:
    """One requirement on one argument; ``problem`` is formatted with ``count`` once the offenders are known."""

    argument: str
    tensor: Any
    family: str
    stats: Any  # 1-D tensor on the argument's device, or a list of host numbers
    passes: Callable[[list[float]], bool]
    bad_mask: Callable[[], Any]  # failure path only: boolean tensor shaped like ``tensor``
    problem: str
    valid_range: str
    range_source: str | None
    fix: str | None = None  # None: the family's, looked up once ``classify`` or ``refine`` has settled the family
    refine: Callable[[Condition, Any], None] | None = None  # names the range's owner once a failure is known
    classify: Callable[[list[float]], str] | None = None  # picks the family from the stats (negative vs too large)
    shown: Callable[[], Any] | None = None  # the tensor whose values to show, when not ``tensor`` itself
    # failure path only: ``problem`` in the words of what the offending elements were, as read (``read_kinds``)
    worded: Callable[[], str] | None = None

    def offenders(self) -> Offenders:
        shown = self.shown() if self.shown is not None else None
        return offenders_from_mask(shown if shown is not None else self.tensor, self.bad_mask())


# An op's check: the mode (for cast provenance) and the op's arguments by schema name in, Conditions out.
Check = Callable[[CastTracker, dict[str, Any]], list[Condition]]


def offenders_from_mask(tensor, mask) -> Offenders:
    mask = mask.expand(tensor.shape) if mask.shape != tensor.shape else mask
    count = int(mask.sum())
    positions = [tuple(row) for row in mask.nonzero()[:_LIMIT].tolist()]
    values = tensor[mask][:_LIMIT].tolist()
    return Offenders(values=values, positions=positions, count=count)


def as_stats(*parts) -> Any:
    """Scalars of any dtype, on their device, as one float64 vector: one read-back for all of them."""
    return torch.stack([p.to(torch.float64) for p in parts])


def minmax(t) -> Any:
    """[min, max] of ``t`` as float64, with one fused pass where torch has ``aminmax``."""
    if _AMINMAX is not None and t.dtype != torch.bool:
        low, high = _AMINMAX(t)
    else:
        low, high = t.min(), t.max()
    return as_stats(low, high)


def dim_size(t, dim: int) -> int:
    return t.size(dim) if t.dim() > 0 else 1


def usable(t) -> bool:
    """Plain tensors with data: fakes, metas and wrapper subclasses are left to their own machinery."""
    return (
        isinstance(t, torch.Tensor)
        and type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.device.type != "meta"
        and t.numel() > 0
    )


def index_in_range(
    argument: str,
    t,
    low: int,
    high: int,
    family: str,
    range_source: str,
    *,
    fix: str | None = None,
    ignore: int | None = None,
    refine: Callable[[Condition, Any], None] | None = None,
) -> list[Condition]:
    """Every element of ``t`` in ``[low, high)``; elements equal to ``ignore`` (a loss's ignore_index) pass."""
    if not usable(t) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        return []
    masked = t
    if ignore is not None and not (low <= ignore < high):
        masked = t.masked_fill(t == ignore, low)

    def bad_mask():
        outside = (t < low) | (t >= high)
        return outside & (t != ignore) if ignore is not None else outside

    valid = f"[{low}, {high})" + (f" or {ignore} (ignore_index)" if ignore is not None else "")
    return [
        Condition(
            argument=argument,
            tensor=t,
            family=family,
            stats=minmax(masked),
            passes=lambda s: low <= s[0] and s[1] < high,
            bad_mask=bad_mask,
            problem="has {count} value(s) outside " + f"[{low}, {high})",
            valid_range=valid,
            range_source=range_source,
            fix=fix,
            refine=refine,
        )
    ]


def probabilities_in_unit_interval(
    argument: str, t, family: str, range_source: str, *, fix: str | None = None
) -> list[Condition]:
    """Every element in [0, 1]; NaN fails (aminmax propagates it and every comparison with it is false)."""
    if not usable(t) or not t.is_floating_point():
        return []
    return [
        Condition(
            argument=argument,
            tensor=t,
            family=family,
            stats=minmax(t),
            passes=lambda s: s[0] >= 0.0 and s[1] <= 1.0,
            bad_mask=lambda: ~((t >= 0) & (t <= 1)),
            problem="has {count} value(s) outside [0, 1] or NaN",  # what fails, not a claim that a NaN was read
            valid_range="[0, 1]",
            range_source=range_source,
            fix=fix,
            worded=lambda: read_kinds(t[~((t >= 0) & (t <= 1))], "outside [0, 1]", above=1.0),
        )
    ]


def non_negative(
    argument: str, t, family: str, range_source: str, *, fix: str | None = None, allow_nan: bool = False
) -> list[Condition]:
    if not usable(t) or t.dtype == torch.bool or t.is_complex():
        return []
    floating = t.is_floating_point()
    stats = t.min().reshape(1).to(torch.float64)
    return [
        Condition(
            argument=argument,
            tensor=t,
            family=family,
            stats=stats,
            passes=lambda s: s[0] >= 0 or (allow_nan and math.isnan(s[0])),
            bad_mask=(lambda: ~(t >= 0)) if floating else (lambda: t < 0),
            problem="has {count} negative" + (" or NaN" if floating else "") + " value(s)",
            valid_range=">= 0",
            range_source=range_source,
            fix=fix,
            worded=(lambda: read_kinds(t[~(t >= 0)], "that are not >= 0")) if floating else None,
        )
    ]


def read_kinds(bad, what: str, *, above: float | None = None) -> str:
    """``has 3 value(s) <what> (2 negative, 1 NaN)``: how many of the offending elements ``bad`` (a float tensor)
    were NaN, infinite, negative or above ``above``, naming only the kinds read: a report over negative
    probabilities says nothing of NaN (issue 31)."""
    finite = torch.isfinite(bad)
    kinds = [("NaN", torch.isnan(bad)), ("inf", torch.isinf(bad)), ("negative", finite & (bad < 0))]
    if above is not None:
        kinds.append((f"above {above:g}", finite & (bad > above)))
    said = [f"{int(found.sum())} {word}" for word, found in kinds if bool(found.any())]
    return f"has {bad.numel()} value(s) {what} ({', '.join(said)})"


def offsets_out_of_order(offsets, limit: int):
    """Where cumulative offsets (EmbeddingBag's, grouped GEMM's) go below 0, past ``limit``, or decrease."""
    bad = (offsets < 0) | (offsets > limit)
    if offsets.numel() > 1:
        bad[1:] |= offsets[1:] < offsets[:-1]
    return bad


def cast_condition(argument: str, index, flag, source_ref) -> Condition:
    """``index`` was cast from a floating tensor; ``flag`` (computed at the cast, not synchronised) says if that
    tensor was all finite. NaN becomes an arbitrary integer (0 on CUDA), so a range check alone can miss it."""

    def source():
        found = source_ref()
        return found if found is not None and found.shape == index.shape else None

    def bad_mask():
        found = source()
        return ~torch.isfinite(found) if found is not None else torch.zeros_like(index, dtype=torch.bool)

    return Condition(
        argument=argument,
        tensor=index,
        family="nan_or_inf",
        stats=flag.reshape(1).to(torch.float64),
        passes=lambda s: s[0] == 1,
        bad_mask=bad_mask,
        problem="was cast to an integer index from a floating tensor holding {count} NaN/inf value(s)",
        valid_range="finite values before the cast",
        range_source="the float -> integer cast that produced it",
        shown=source,
    )


def mark_nan_cast(condition: Condition) -> None:
    """An integer argument whose offending values include its dtype's minimum holds a NaN or inf cast to an integer
    (``float('nan')`` becomes -9223372036854775808 as int64, on the CPU and on CUDA alike), not a negative id: the
    family is ``nan_or_inf`` and the fix is upstream, where the NaN enters. Catches the casts made before the checks
    were on, which the mode's own cast tracking (``cast_condition``) cannot have seen."""
    t = condition.tensor
    if condition.family == "nan_or_inf" or not isinstance(t, torch.Tensor) or t.dtype not in _SIGNED_INDEX:
        return
    lowest = torch.iinfo(t.dtype).min
    if not bool((condition.bad_mask() & (t == lowest)).any()):
        return
    condition.family = "nan_or_inf"
    condition.problem = (
        "has {count} value(s) outside " + f"{condition.valid_range}, including {lowest}: what a NaN or inf becomes "
        "when a float is cast to an integer"
    )
    condition.fix = None


_SIGNED_INDEX = (torch.int64, torch.int32)
