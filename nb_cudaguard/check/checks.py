"""What each assert-prone aten op needs from its arguments, as Conditions the guard evaluates before the op runs.

A Condition holds one small reduction of one argument (``stats``: a 1-D tensor, left on the argument's device so
that nothing is copied until the guard reads all of an op's stats back at once), a host-side test of those
numbers, and, for the failure path only, how to find the offending elements. The ranges are the ones the CUDA
kernels assert (``shared/reference/torch_cuda_asserts.json``), which are also the ones the CPU kernels enforce,
so a tensor the guard accepts runs unchanged and a tensor it rejects would have failed anyway.

Written against the op schemas: checks read arguments by name, so ``.out`` overloads and keyword calls work too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

_LIMIT = 5  # offending values and positions shown

_AMINMAX = getattr(torch, "aminmax", None)
_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


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
    fix: str
    refine: Callable[[Condition, Any], None] | None = None  # names the range's owner once a failure is known
    classify: Callable[[list[float]], str] | None = None  # picks the family from the stats (negative vs too large)
    shown: Callable[[], Any] | None = None  # the tensor whose values to show, when not ``tensor`` itself

    def offenders(self) -> Offenders:
        shown = self.shown() if self.shown is not None else None
        return offenders_from_mask(shown if shown is not None else self.tensor, self.bad_mask())


def offenders_from_mask(tensor, mask) -> Offenders:
    mask = mask.expand(tensor.shape) if mask.shape != tensor.shape else mask
    count = int(mask.sum())
    positions = [tuple(row) for row in mask.nonzero()[:_LIMIT].tolist()]
    values = tensor[mask][:_LIMIT].tolist()
    return Offenders(values=values, positions=positions, count=count)


def _as_stats(*parts) -> Any:
    return torch.stack([p.to(torch.float64) for p in parts])


def minmax(t) -> Any:
    """[min, max] of ``t`` as float64, with one fused pass where torch has ``aminmax``."""
    if _AMINMAX is not None and t.dtype != torch.bool:
        low, high = _AMINMAX(t)
    else:
        low, high = t.min(), t.max()
    return _as_stats(low, high)


def _dim_size(t, dim: int) -> int:
    return t.size(dim) if t.dim() > 0 else 1


def _usable(t) -> bool:
    """Plain tensors with data: fakes, metas and wrapper subclasses are left to their own machinery."""
    return (
        isinstance(t, torch.Tensor)
        and type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.device.type != "meta"
        and t.numel() > 0
    )


# --- building blocks --------------------------------------------------------------------------------------------


def index_in_range(
    argument: str,
    t,
    low: int,
    high: int,
    family: str,
    range_source: str,
    fix: str,
    ignore: int | None = None,
    refine=None,
) -> list[Condition]:
    """Every element of ``t`` in ``[low, high)``; elements equal to ``ignore`` (a loss's ignore_index) pass."""
    if not _usable(t) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
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


def probabilities_in_unit_interval(argument: str, t, family: str, range_source: str, fix: str) -> list[Condition]:
    """Every element in [0, 1]; NaN fails (aminmax propagates it and every comparison with it is false)."""
    if not _usable(t) or not t.is_floating_point():
        return []
    return [
        Condition(
            argument=argument,
            tensor=t,
            family=family,
            stats=minmax(t),
            passes=lambda s: s[0] >= 0.0 and s[1] <= 1.0,
            bad_mask=lambda: ~((t >= 0) & (t <= 1)),
            problem="has {count} value(s) outside [0, 1] (NaN included)",
            valid_range="[0, 1]",
            range_source=range_source,
            fix=fix,
        )
    ]


def non_negative(argument: str, t, family: str, range_source: str, fix: str, allow_nan: bool = False):
    if not _usable(t) or t.dtype == torch.bool or t.is_complex():
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
        )
    ]


# --- fixes, in the user's terms ----------------------------------------------------------------------------------

FIX_LABELS = (
    "Make every label lie in [0, num_classes) or equal ignore_index: labels numbered from 1 need `labels - 1`; "
    "'void' values such as 255 or -1 need ignore_index=255 (or mapping to -100); a classifier head smaller than the "
    "number of classes needs num_labels / out_features raised."
)
FIX_EMBEDDING = (
    "Keep ids in [0, num_embeddings): check the tokenizer and the model come from the same checkpoint, call "
    "model.resize_token_embeddings(len(tokenizer)) after adding tokens, or enlarge nn.Embedding(num_embeddings=...)."
)
FIX_POSITIONS = (
    "The sequence is longer than max_position_embeddings: tokenize with truncation=True and "
    "max_length=model.config.max_position_embeddings, or shorten the inputs."
)
FIX_TOKEN_TYPES = (
    "token_type_ids must be < type_vocab_size (usually 2, or 1 for RoBERTa-style models): drop token_type_ids or "
    "build them with the model's own tokenizer."
)
FIX_VOCAB = (
    "Tokens were added to the tokenizer but the embedding table was not resized: call "
    "model.resize_token_embeddings(len(tokenizer))."
)
FIX_INDEX = "Keep indices in the valid range of the indexed dimension (check idx.min() and idx.max() against its size)."
FIX_GATHER = "Every entry of `index` must be in [0, self.size(dim)): gather/scatter do not wrap negative indices."
FIX_BCE_INPUT = (
    "binary_cross_entropy expects probabilities: apply torch.sigmoid first, or better use "
    "nn.BCEWithLogitsLoss / F.binary_cross_entropy_with_logits on the raw logits; check the model output for NaN."
)
FIX_BCE_TARGET = "Scale or binarise the targets into [0, 1] (e.g. mask / 255 or (mask > 0).float())."
FIX_MULTINOMIAL = (
    "Sample from valid probabilities: compute softmax in float32, keep temperature > 0, make sure top-k/top-p "
    "filtering leaves at least one token per row, and find where NaN/inf entered the logits."
)
FIX_ONE_HOT = "Pass num_classes larger than the largest label (or fix the labels), and make labels non-negative."
FIX_CTC = (
    "CTC targets must be class indices in [0, C) other than blank; input_lengths <= T (log_probs.size(0)); "
    "target_lengths <= the padded target length (or summing to targets.numel() for concatenated targets)."
)
FIX_NAN = "A NaN or inf was cast to an integer index: find where it enters (torch.isfinite(x).all()) before the cast."
FIX_BERNOULLI = "Bernoulli probabilities must lie in [0, 1]: use torch.sigmoid on logits and check for NaN."
FIX_COUNTS = "Counts, lengths and repeats must be non-negative integers."


# --- per-op checks -----------------------------------------------------------------------------------------------
# Each takes the guard (for cast provenance) and the op's arguments by schema name, and returns Conditions.


def _embedding_refine(weight):
    def refine(cond: Condition, names) -> None:
        owner = names.owner_of_weight(weight)
        if owner is None:
            return
        path, module = owner
        size = getattr(module, "num_embeddings", weight.shape[0])
        cond.range_source = f"{path}.num_embeddings = {size}"
        lowered = path.lower()
        if "position" in lowered:
            cond.family, cond.fix = "position_ids_too_long", FIX_POSITIONS
        elif "token_type" in lowered:
            cond.family, cond.fix = "token_type_ids_out_of_range", FIX_TOKEN_TYPES
        else:
            larger = [(name, n) for name, n in names.tokenizers() if n > size]
            if larger:
                name, n = larger[0]
                cond.family, cond.fix = "vocab_resize_missing", FIX_VOCAB
                cond.range_source += f"; len({name}) = {n}"

    return refine


def _embedding_ids(guard, argument, indices, rows: int, source: str, weight=None) -> list[Condition]:
    refine = _embedding_refine(weight) if weight is not None else None
    return guard.cast_conditions(argument, indices) + index_in_range(
        argument, indices, 0, rows, "embedding_index_out_of_range", source, FIX_EMBEDDING, refine=refine
    )


def check_embedding(guard, a) -> list[Condition]:
    weight = a["weight"]
    return _embedding_ids(guard, "indices", a["indices"], weight.shape[0], "weight.shape[0]", weight)


def check_embedding_renorm(guard, a) -> list[Condition]:
    weight = a["self"]
    return _embedding_ids(guard, "indices", a["indices"], weight.shape[0], "weight.shape[0]", weight)


def check_embedding_backward(guard, a) -> list[Condition]:
    return _embedding_ids(guard, "indices", a["indices"], int(a["num_weights"]), "num_weights (the embedding's rows)")


def check_embedding_bag(guard, a) -> list[Condition]:
    weight, indices, offsets = a["weight"], a["indices"], a.get("offsets")
    conditions = _embedding_ids(guard, "indices", indices, weight.shape[0], "weight.shape[0]", weight)
    return conditions + _bag_offsets(offsets, indices.numel())


def check_embedding_bag_backward(guard, a) -> list[Condition]:
    rows = int(a["num_weights"]) if "num_weights" in a else a["weight"].shape[0]
    return _embedding_ids(guard, "indices", a["indices"], rows, "num_weights (the embedding's rows)")


def _offsets_out_of_order(offsets, limit: int):
    """Where cumulative offsets (EmbeddingBag's, grouped GEMM's) go below 0, past ``limit``, or decrease."""
    bad = (offsets < 0) | (offsets > limit)
    if offsets.numel() > 1:
        bad[1:] |= offsets[1:] < offsets[:-1]
    return bad


def _bag_offsets(offsets, length: int) -> list[Condition]:
    """Offsets start at >= 0, never decrease, and end within the input: EmbeddingBag.cu asserts ``end >= begin``."""
    if not _usable(offsets) or offsets.dim() != 1:
        return []
    steps = offsets[1:] - offsets[:-1] if offsets.numel() > 1 else offsets.new_zeros(1)
    stats = _as_stats(offsets[0], steps.min(), offsets[-1])

    def bad_mask():
        return _offsets_out_of_order(offsets, length)

    return [
        Condition(
            argument="offsets",
            tensor=offsets,
            family="embedding_index_out_of_range",
            stats=stats,
            passes=lambda s: s[0] >= 0 and s[1] >= 0 and s[2] <= length,
            bad_mask=bad_mask,
            problem="has {count} value(s) that start a bag before the previous one or past the input",
            valid_range=f"non-decreasing, within [0, {length}]",
            range_source="indices.numel()",
            fix="Build offsets as the cumulative start of each bag: non-decreasing, first 0, last <= len(input).",
        )
    ]


def check_index_select(guard, a) -> list[Condition]:
    t, dim, index = a["self"], a["dim"], a["index"]
    if t.is_sparse:
        return []
    size = _dim_size(t, dim)
    return guard.cast_conditions("index", index) + index_in_range(
        "index", index, 0, size, "advanced_index_out_of_bounds", f"self.shape[{dim}]", FIX_INDEX
    )


def _dim_checks(guard, argument: str, index, size: int, dim: int, negative_ok: bool, family: str, fix: str):
    low = -size if negative_ok else 0
    return guard.cast_conditions(argument, index) + index_in_range(
        argument, index, low, size, family, f"self.shape[{dim}]", fix
    )


def check_index_dim(guard, a, negative_ok: bool = False) -> list[Condition]:
    """index_add / index_copy / index_reduce (``[0, size)``) and index_fill (``[-size, size)``)."""
    t, dim, index = a["self"], a["dim"], a["index"]
    return _dim_checks(
        guard, "index", index, _dim_size(t, dim), dim, negative_ok, "advanced_index_out_of_bounds", FIX_INDEX
    )


def check_index_fill(guard, a) -> list[Condition]:
    return check_index_dim(guard, a, negative_ok=True)


def check_advanced_index(guard, a) -> list[Condition]:
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
        size = _dim_size(t, dim)
        argument = f"indices[{position}]"
        conditions += guard.cast_conditions(argument, index)
        conditions += index_in_range(
            argument, index, -size, size, "advanced_index_out_of_bounds", f"self.shape[{dim}]", FIX_INDEX
        )
        dim += 1
    return conditions


def check_take(guard, a) -> list[Condition]:
    t, index = a["self"], a["index"]
    n = t.numel()
    return guard.cast_conditions("index", index) + index_in_range(
        "index", index, -n, n, "advanced_index_out_of_bounds", "self.numel()", FIX_INDEX
    )


def check_gather_scatter(guard, a) -> list[Condition]:
    t, dim, index = a["self"], a["dim"], a["index"]
    labels = _one_hot_labels(t, dim, index, a.get("value"))
    if labels is not None:
        return check_one_hot(guard, {"self": labels, "num_classes": t.size(-1)})
    return _dim_checks(guard, "index", index, _dim_size(t, dim), dim, False, "gather_scatter_index", FIX_GATHER)


def _one_hot_labels(t, dim, index, value):
    """The labels, if this scatter is ``F.one_hot`` on CUDA: ``Onehot.cpp`` skips its host checks there ("rely on
    device assert thrown by scatter") and runs ``zeros(shape + [C]).scatter_(-1, labels.unsqueeze(-1), 1)``."""
    if dim != -1 or value is None or value != 1 or t.dtype != torch.int64 or index.dtype != torch.int64:
        return None
    if index._base is None or index.shape[-1:] != (1,) or t.shape[:-1] != index.shape[:-1]:
        return None
    base = index._base  # the user's labels themselves, unless they were a view already
    return base if base.shape == index.shape[:-1] else index.squeeze(-1)


def _class_conditions(guard, a, classes: int, source: str) -> list[Condition]:
    target = a["target"]
    ignore = a.get("ignore_index")
    conditions = guard.cast_conditions("target", target)
    weight = a.get("weight")
    if weight is not None and weight.numel() != classes:
        conditions.append(
            Condition(
                argument="weight",
                tensor=weight,
                family="num_classes_mismatch",
                stats=[float(weight.numel())],
                passes=lambda s: False,
                bad_mask=lambda: torch.zeros((), dtype=torch.bool),
                problem=f"has {weight.numel()} class weights for {classes} classes",
                valid_range=f"{classes} elements",
                range_source=source,
                fix="Give one weight per class: weight=torch.tensor([...]) with num_classes entries.",
            )
        )
    ignore = int(ignore) if ignore is not None else None
    found = index_in_range("target", target, 0, classes, "label_out_of_range", source, FIX_LABELS, ignore=ignore)
    for cond in found:
        cond.classify = lambda s: "label_out_of_range" if s[1] >= classes else "negative_label"
    return conditions + found


def check_nll_loss(guard, a) -> list[Condition]:
    t = a["self"]
    classes = t.size(-1) if t.dim() > 0 else 1
    return _class_conditions(guard, a, classes, f"input.shape[{max(t.dim() - 1, 0)}] (classes)")


def check_nll_loss2d(guard, a) -> list[Condition]:
    return _class_conditions(guard, a, a["self"].size(1), "input.shape[1] (classes)")


def check_multi_margin_loss(guard, a) -> list[Condition]:
    t = a["self"]
    classes = t.size(-1) if t.dim() > 0 else 1
    return _class_conditions(guard, a, classes, f"input.shape[{max(t.dim() - 1, 0)}] (classes)")


def check_bce(guard, a) -> list[Condition]:
    return probabilities_in_unit_interval(
        "input", a["self"], "bce_input_range", "binary_cross_entropy's domain", FIX_BCE_INPUT
    ) + probabilities_in_unit_interval(
        "target", a["target"], "bce_target_range", "binary_cross_entropy's domain", FIX_BCE_TARGET
    )


def check_multinomial(guard, a) -> list[Condition]:
    """No NaN, inf or negative entry, and every row sums to more than zero (summed in float32 at least)."""
    probs = a["self"]
    if not _usable(probs) or not probs.is_floating_point():
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
            valid_range="finite, >= 0, each row summing to > 0",
            range_source="torch.multinomial",
            fix=FIX_MULTINOMIAL,
        )
    ]


def check_one_hot(guard, a) -> list[Condition]:
    labels, classes = a["self"], int(a.get("num_classes", -1))
    if classes < 0:
        return guard.cast_conditions("input", labels) + non_negative(
            "input", labels, "one_hot_num_classes", "num_classes=-1 (inferred from the largest label)", FIX_ONE_HOT
        )
    return guard.cast_conditions("input", labels) + index_in_range(
        "input", labels, 0, classes, "one_hot_num_classes", f"num_classes = {classes}", FIX_ONE_HOT
    )


def check_ctc_loss(guard, a) -> list[Condition]:
    log_probs, targets, blank = a["log_probs"], a["targets"], int(a["blank"])
    if not _usable(log_probs):
        return []
    classes, steps = log_probs.size(-1), log_probs.size(0)
    in_lengths, target_lengths = a["input_lengths"], a["target_lengths"]
    conditions = _lengths("input_lengths", in_lengths, 0, steps, f"log_probs.shape[0] = {steps} (T)")
    if isinstance(targets, torch.Tensor) and targets.dim() == 2:
        width = targets.size(1)
        conditions += _lengths("target_lengths", target_lengths, 0, width, f"targets.shape[1] = {width}")
        conditions += _ctc_targets(targets, target_lengths, classes, blank)
    elif isinstance(targets, torch.Tensor):
        conditions += _ctc_targets(targets, None, classes, blank)
    return conditions


def _lengths(argument: str, lengths, low: int, high: int, source: str) -> list[Condition]:
    """Lengths as a tensor (one reduction) or a host list (no reduction at all)."""
    if isinstance(lengths, torch.Tensor):
        return index_in_range(argument, lengths, low, high + 1, "ctc_loss", source, FIX_CTC)
    values = [int(v) for v in lengths]
    bad = [i for i, v in enumerate(values) if not low <= v <= high]
    if not bad:
        return []
    host = torch.tensor(values)
    return [
        Condition(
            argument=argument,
            tensor=host,
            family="ctc_loss",
            stats=[0.0],
            passes=lambda s: False,
            bad_mask=lambda: (host < low) | (host > high),
            problem="has {count} value(s) outside " + f"[{low}, {high}]",
            valid_range=f"[{low}, {high}]",
            range_source=source,
            fix=FIX_CTC,
        )
    ]


def _ctc_targets(targets, target_lengths, classes: int, blank: int) -> list[Condition]:
    """Targets in [0, C) and never blank, counting only the first target_lengths[i] entries of a padded row."""
    if not _usable(targets) or targets.is_floating_point():
        return []
    if target_lengths is not None:
        lengths = torch.as_tensor(target_lengths, device=targets.device)
        used = torch.arange(targets.size(1), device=targets.device) < lengths.unsqueeze(-1)
    else:
        used = torch.ones_like(targets, dtype=torch.bool)

    def bad_mask():
        return used & ((targets < 0) | (targets >= classes) | (targets == blank))

    return [
        Condition(
            argument="targets",
            tensor=targets,
            family="ctc_loss",
            stats=bad_mask().any().reshape(1).to(torch.float64),
            passes=lambda s: s[0] == 0,
            bad_mask=bad_mask,
            problem="has {count} label(s) outside " + f"[0, {classes}) or equal to blank={blank}",
            valid_range=f"[0, {classes}) except blank={blank}",
            range_source=f"log_probs.shape[-1] = {classes} (C)",
            fix=FIX_CTC,
        )
    ]


def check_bincount(guard, a) -> list[Condition]:
    return guard.cast_conditions("self", a["self"]) + non_negative(
        "self", a["self"], "other", "torch.bincount", "bincount counts non-negative integers: shift or filter them."
    )


def check_bernoulli(guard, a) -> list[Condition]:
    """``torch.bernoulli(p)`` samples with probabilities ``self``; ``bernoulli_(p)`` with a tensor ``p``. A float
    ``p`` is checked on the host by torch itself."""
    if "p" not in a:
        return probabilities_in_unit_interval("p", a["self"], "other", "torch.bernoulli", FIX_BERNOULLI)
    if isinstance(a["p"], torch.Tensor):
        return probabilities_in_unit_interval("p", a["p"], "other", "Tensor.bernoulli_", FIX_BERNOULLI)
    return []


def check_poisson(guard, a) -> list[Condition]:
    return non_negative(
        "rates", a["self"], "other", "torch.poisson", "Poisson rates must be >= 0 and not NaN (e.g. clamp_min(0))."
    )


def check_masked_scatter(guard, a) -> list[Condition]:
    t, mask, source = a["self"], a["mask"], a["source"]
    if not _usable(mask) or not _usable(t):
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


def check_max_unpool(guard, a) -> list[Condition]:
    indices, output_size = a["indices"], [int(s) for s in a["output_size"]]
    plane = math.prod(output_size)
    return index_in_range(
        "indices",
        indices,
        0,
        plane,
        "advanced_index_out_of_bounds",
        f"output_size {tuple(output_size)}",
        "Pass the indices returned by the matching max_pool call (return_indices=True) and its input's size.",
    )


def check_repeat_interleave(guard, a) -> list[Condition]:
    """Repeats non-negative (Repeat.cu); for the plain ``repeat_interleave(repeats, output_size=N)`` form, N must
    be their sum. The ``self``/``dim`` forms broadcast a single repeat, so only the sign is checked there."""
    repeats, output_size = a["repeats"], a.get("output_size")
    if not isinstance(repeats, torch.Tensor):
        return []
    conditions = non_negative("repeats", repeats, "other", "torch.repeat_interleave", FIX_COUNTS)
    if output_size is not None and "self" not in a and _usable(repeats):
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


def check_segment_reduce(guard, a) -> list[Condition]:
    lengths = a.get("lengths")
    return non_negative("lengths", lengths, "other", "torch.segment_reduce", FIX_COUNTS) if lengths is not None else []


def check_assert_async(guard, a) -> list[Condition]:
    t = a["self"]
    if not _usable(t):
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


def check_grouped_mm(guard, a) -> list[Condition]:
    """``offs``: non-decreasing, non-negative, ending within the grouped dimension (GroupMMCommon.cuh)."""
    mat_a, mat_b, offs = a["self"], a["mat2"], a.get("offs")
    if offs is None or not _usable(offs) or offs.dim() != 1:
        return []
    if mat_a.dim() == 2 and mat_b.dim() == 2:
        limit, source = mat_a.size(1), "self.shape[1] (K)"
    elif mat_a.dim() == 2:
        limit, source = mat_a.size(0), "self.shape[0] (rows of the grouped input)"
    else:
        limit, source = mat_b.size(-1), "mat2.shape[-1] (columns of the grouped input)"
    first = offs[:1]
    steps = offs[1:] - offs[:-1] if offs.numel() > 1 else first - first
    stats = _as_stats(first.min(), steps.min(), offs.max())

    def bad_mask():
        return _offsets_out_of_order(offs, limit)

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
        fix=FIX_NAN,
        shown=source,
    )


# packet name -> check; every overload of the packet (incl. in-place and .out) is checked the same way.
CHECKS: dict[str, Callable] = {
    "embedding": check_embedding,
    "embedding_renorm_": check_embedding_renorm,
    "embedding_dense_backward": check_embedding_backward,
    "embedding_backward": check_embedding_backward,
    "embedding_sparse_backward": check_embedding_backward,
    "_embedding_bag": check_embedding_bag,
    "_embedding_bag_forward_only": check_embedding_bag,
    "_embedding_bag_backward": check_embedding_bag_backward,
    "_embedding_bag_dense_backward": check_embedding_bag_backward,
    "_embedding_bag_sparse_backward": check_embedding_bag_backward,
    "_embedding_bag_per_sample_weights_backward": check_embedding_bag_backward,
    "index_select": check_index_select,
    "index": check_advanced_index,
    "_unsafe_index": check_advanced_index,
    "index_put": check_advanced_index,
    "index_put_": check_advanced_index,
    "_index_put_impl_": check_advanced_index,
    "_unsafe_index_put": check_advanced_index,
    "take": check_take,
    "put": check_take,
    "put_": check_take,
    "gather": check_gather_scatter,
    "scatter": check_gather_scatter,
    "scatter_": check_gather_scatter,
    "scatter_add": check_gather_scatter,
    "scatter_add_": check_gather_scatter,
    "scatter_reduce": check_gather_scatter,
    "scatter_reduce_": check_gather_scatter,
    "index_add": check_index_dim,
    "index_add_": check_index_dim,
    "index_reduce": check_index_dim,
    "index_reduce_": check_index_dim,
    "index_copy": check_index_dim,
    "index_copy_": check_index_dim,
    "index_fill": check_index_fill,
    "index_fill_": check_index_fill,
    "nll_loss_forward": check_nll_loss,
    "nll_loss_backward": check_nll_loss,
    "nll_loss2d_forward": check_nll_loss2d,
    "nll_loss2d_backward": check_nll_loss2d,
    "multi_margin_loss": check_multi_margin_loss,
    "multi_margin_loss_backward": check_multi_margin_loss,
    "binary_cross_entropy": check_bce,
    "binary_cross_entropy_backward": check_bce,
    "multinomial": check_multinomial,
    "_ctc_loss": check_ctc_loss,
    "_ctc_loss_backward": check_ctc_loss,
    "bincount": check_bincount,
    "bernoulli": check_bernoulli,
    "bernoulli_": check_bernoulli,
    "poisson": check_poisson,
    "masked_scatter": check_masked_scatter,
    "masked_scatter_": check_masked_scatter,
    "max_unpool2d": check_max_unpool,
    "max_unpool3d": check_max_unpool,
    "repeat_interleave": check_repeat_interleave,
    "segment_reduce": check_segment_reduce,
    "_assert_async": check_assert_async,
    "_grouped_mm": check_grouped_mm,
}
