"""The fast checks' building blocks: each computes the violation mask, folds it into the board and returns safe
values for the op to run on, with plain tensor ops only (no ``.item()``, no ``if`` on a tensor's value).

The ranges are the exact mode's (``conditions``), which are the ones the CUDA kernels assert. Safe values are
chosen so that the kernel cannot assert and the values that were valid stay exactly as they were: an index is
clamped into its range (a loss's ``ignore_index`` is kept), a probability is clamped into [0, 1] with NaN made 0,
a count or a rate below 0 (or NaN) becomes 0, a multinomial row with nothing to draw becomes uniform, offsets are
made non-decreasing within their limit. Where nothing fires, the op therefore sees the same values and returns
the same result. Gradients still flow to the original tensor where it was valid (``torch.where`` keeps it there).

Each function takes the site (an int from ``fast.sites``) of the argument it checks.
"""

from __future__ import annotations

import torch

from nb_cudaguard.check.conditions import offsets_out_of_order
from nb_cudaguard.check.fast.board import BOARD, fold
from nb_cudaguard.check.fast.known import KNOWN

compiling = torch.compiler.is_compiling  # Dynamo folds it to True while tracing; one call in eager


def _fold(site: int, x, bad) -> None:
    """Into the board: traced into the graph under ``torch.compile``, otherwise held to be folded with the cell's
    other checks where it can wait (``Board.defer``)."""
    if compiling():
        fold(site, x.detach(), bad)
    else:
        BOARD.defer(site, x, bad)


_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_INTEGER_DTYPES = frozenset(
    getattr(torch, name)
    for name in ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
    if hasattr(torch, name)  # the wider unsigned types are newer than the oldest torch supported
)


def plain(t) -> bool:
    """Plain tensors with data. Fakes, functional wrappers (what AOTAutograd traces with), metas and other
    subclasses pass through unchecked: a compiled graph already holds the checks Dynamo traced around them.
    Runs on every checked call, so it reads attributes that build no object (``is_meta``, not ``device.type``)."""
    return type(t) in _PLAIN_TYPES and not t.is_meta and t.numel() > 0


def integral(t) -> bool:
    """An integer tensor (not bool, float, complex or quantized): what an index may be."""
    return plain(t) and t.dtype in _INTEGER_DTYPES


def integer_typed(t) -> bool:
    """``integral`` without its questions of the values (a meta tensor, an empty one), which ``checked_index`` asks
    only of an index it goes on to check the deferred way: on a new batch's cold path each costs 1-3 µs."""
    return type(t) in _PLAIN_TYPES and t.dtype in _INTEGER_DTYPES


def index_in_range(site: int, x, low: int, high: int, ignore: int | None = None):
    """``x`` within ``[low, high)``; values equal to ``ignore`` (a loss's ignore_index) are valid and kept."""
    if not compiling():
        return eager_index(site, x, low, high, ignore)
    safe = x.clamp(low, high - 1)
    if ignore is not None and not low <= ignore < high:
        safe = torch.where(x.eq(ignore), x, safe)  # an ignored target stays as it is
    fold(site, x.detach(), safe.ne(x))
    return safe


def eager_index(site: int, x, low: int, high: int, ignore: int | None = None):
    """``index_in_range`` in eager mode (the caller knows Dynamo is not tracing): the safe values are remembered
    for the same check of the same unchanged ``x`` (``fast.known``)."""
    safe = x.clamp(low, high - 1)
    if ignore is not None and not low <= ignore < high:
        if x.dtype == torch.int64:  # in place, no allocation: ``safe`` is the clamp's own new tensor
            safe.masked_fill_(x.eq(ignore), ignore)
        else:  # a narrower dtype may not hold ``ignore``; the op then raises its own dtype error, not ours
            safe = torch.where(x.eq(ignore), x, safe)
    held = BOARD.hold_ne(site, x, safe)  # inline: the hot path of every index check
    if not held:
        BOARD.defer(site, x, safe.ne(x))
    KNOWN.remember(x, low, high, ignore, safe, held)
    return safe


def unit_interval(site: int, p):
    """``p`` within [0, 1], NaN outside it."""
    held = p.detach()
    fixed = held.nan_to_num(0.0).clamp(0.0, 1.0)
    bad = fixed.ne(held)  # its own tensor, not a slot: autograd keeps where's condition for the backward
    _fold(site, held, bad)
    return torch.where(bad, fixed, p)


def non_negative(site: int, x):
    """``x >= 0``; a floating NaN counts as negative (as in the exact mode). Bad values become 0."""
    if not x.is_floating_point():
        clamped = x.clamp(min=0)
        _fold(site, x, clamped.ne(x))
        return clamped
    ok = x.detach().ge(0)
    bad = ok.logical_not()
    _fold(site, x, bad)
    return torch.where(ok, x, 0.0)


def distribution_rows(site: int, probs):
    """multinomial's input: finite, >= 0, and every row with something to draw."""
    held = probs.detach()
    ok = torch.isfinite(held).logical_and(held.ge(0))
    cleaned = torch.where(ok, held, 0.0)
    empty = cleaned.sum(-1, keepdim=True).le(0)
    bad = ok.logical_not().logical_or(empty)
    _fold(site, held, bad)
    return torch.where(bad, torch.where(empty, 1.0, cleaned), probs)


def monotone_offsets(site: int, offsets, limit: int):
    """Cumulative offsets (EmbeddingBag's, grouped GEMM's): >= 0, non-decreasing, at most ``limit``."""
    bad = offsets_out_of_order(offsets, limit)
    _fold(site, offsets, bad)
    return offsets.clamp(0, limit).cummax(0).values


def selection_fits(site: int, mask, shape, available: int):
    """masked_scatter: the mask selects at most ``available`` elements; the excess selections are dropped."""
    full = mask.expand(shape)
    taken = full.reshape(-1).cumsum(0).reshape(shape)
    bad = full.logical_and(full.sum().gt(available))
    _fold(site, full, bad)
    return full.logical_and(taken.le(available))


def nonzero_condition(site: int, t):
    """``torch._assert_async``'s condition: non-zero; the op is then given a true one."""
    bad = t.eq(0)
    _fold(site, t, bad)
    return torch.ones_like(t, dtype=torch.bool)


def sums_to(site: int, repeats, total: int):
    """repeat_interleave's ``output_size`` equals ``repeats.sum()``; otherwise the op is given repeats that do."""
    mismatch = repeats.sum().ne(total)
    bad = mismatch.expand(repeats.shape)
    _fold(site, repeats, bad)
    fallback = torch.zeros_like(repeats)
    fallback.select(0, 0).fill_(total)
    return torch.where(mismatch, fallback, repeats)


def ctc_labels(site: int, targets, target_lengths, classes: int, blank: int):
    """CTC targets in [0, C) and never blank, counting only the first target_lengths[i] of a padded row; a bad
    label becomes a valid non-blank class."""
    if target_lengths is not None:
        lengths = torch.as_tensor(target_lengths, device=targets.device)
        used = torch.arange(targets.size(1), device=targets.device).lt(lengths.unsqueeze(-1))
    else:
        used = torch.ones_like(targets, dtype=torch.bool)
    wrong = targets.lt(0).logical_or(targets.ge(classes)).logical_or(targets.eq(blank))
    bad = used.logical_and(wrong)
    _fold(site, targets, bad)
    return torch.where(bad, (blank + 1) % max(classes, 1), targets)
