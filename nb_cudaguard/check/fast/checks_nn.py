"""Fast checks of the ``torch.nn.functional`` entry points with a device assert: embeddings, the class-index
losses (cross_entropy, nll_loss, multi_margin_loss), binary_cross_entropy, one_hot and ctc_loss.

Checked at the functional level, so the backward ops never need a check of their own: autograd saves the safe
values the forward ran on, and the backward kernels see the same. The embedding's table owner (position table,
token-type table, a vocabulary smaller than a tokenizer in reach) refines the family once per site, as in the
exact mode (``ops_embedding.embedding_refine``).
"""

from __future__ import annotations

import torch

from nb_cudaguard.check.fast.args import Args, arg, host_violation, site_of, with_arg
from nb_cudaguard.check.fast.casts import check_cast
from nb_cudaguard.check.fast.checks_index import checked_index
from nb_cudaguard.check.fast.readable import VALID, again
from nb_cudaguard.check.fast.rules import (
    compiling,
    ctc_labels,
    integer_typed,
    integral,
    monotone_offsets,
    non_negative,
    plain,
    unit_interval,
)

_EMBEDDING = "embedding_index_out_of_range"
_CLASSES_1D, _CLASSES_2D = "input.shape[0] (classes)", "input.shape[1] (classes)"


def embedding(label: str, args: tuple, kwargs: dict) -> Args:
    """The hottest check (every forward of a language model): ids read valid before, unchanged, cost a lookup and
    no argument test (``readable.again``: a tensor it finds passed them), so that a batch passed to every step is
    checked for about what one op costs (docs/performance.md)."""
    ids = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    if not isinstance(weight, torch.Tensor):
        return args, kwargs
    shape = weight.shape  # one read (``class_target``)
    if not shape:
        return args, kwargs
    eager = not compiling()
    if (eager and VALID and again(ids, 0, shape[0], None)) or not (integer_typed(ids) if eager else integral(ids)):
        return args, kwargs
    safe = checked_index(label, "indices", _EMBEDDING, ids, 0, shape[0], "weight.shape[0]", table=weight, eager=eager)
    return ((safe, *args[1:]), kwargs) if args else with_arg(args, kwargs, 0, "input", safe)


def embedding_bag(label: str, args: tuple, kwargs: dict) -> Args:
    args, kwargs = embedding(label, args, kwargs)
    ids, offsets = arg(args, kwargs, 0, "input"), arg(args, kwargs, 2, "offsets")
    if not integral(offsets) or offsets.dim() != 1 or not plain(ids):
        return args, kwargs
    length = ids.numel()
    site = site_of(
        label,
        "offsets",
        _EMBEDDING,
        offsets,
        f"non-decreasing, within [0, {length}]",
        "input.numel()",
        "Build offsets as the cumulative start of each bag: non-decreasing, first 0, last <= len(input).",
    )
    return with_arg(args, kwargs, 2, "offsets", monotone_offsets(site, offsets, length))


def class_target(label: str, args: tuple, kwargs: dict, ignore_position: int | None = 4) -> Args:
    """cross_entropy / nll_loss (``ignore_position`` 4) and multi_margin_loss (no ignore_index): class indices in
    [0, C). A negative first offender is reported as ``negative_label`` when the error is built. Like ``embedding``,
    the targets read valid before, unchanged, cost a lookup and no argument test; a class-weight vector of the wrong
    size is then left to the op's own host check (a first call, with the same targets, has raised ours)."""
    logits = args[0] if args else kwargs.get("input")
    target = args[1] if len(args) > 1 else kwargs.get("target")
    if not isinstance(logits, torch.Tensor):
        return args, kwargs
    shape = logits.shape  # one read: each costs about 2 µs on a new batch's cold path (``checked_index``)
    if not shape:
        return args, kwargs
    classes = shape[1] if len(shape) >= 2 else shape[0]
    ignore = arg(args, kwargs, ignore_position, "ignore_index", -100) if ignore_position is not None else None
    kept = int(ignore) if ignore is not None else None
    eager = not compiling()
    if eager and VALID and again(target, 0, classes, kept):
        return args, kwargs
    if not integer_typed(target):  # fake or functional targets pass (``plain``); meta or empty ones have no values
        return args, kwargs
    source = _CLASSES_2D if len(shape) >= 2 else _CLASSES_1D
    weight = arg(args, kwargs, 2 if ignore_position is not None else 4, "weight")
    if isinstance(weight, torch.Tensor) and weight.numel() != classes:
        raise host_violation(
            label,
            "weight",
            "num_classes_mismatch",
            weight,
            f"has {weight.numel()} class weights for {classes} classes",
            f"{classes} elements",
            source,
            fix="Give one weight per class: weight=torch.tensor([...]) with num_classes entries.",
        )
    safe = checked_index(label, "target", "label_out_of_range", target, 0, classes, source, ignore=kept, eager=eager)
    return with_arg(args, kwargs, 1, "target", safe)


def margin_target(label: str, args: tuple, kwargs: dict) -> Args:
    return class_target(label, args, kwargs, ignore_position=None)


def binary_cross_entropy(label: str, args: tuple, kwargs: dict) -> Args:
    for position, name, family in ((0, "input", "bce_input_range"), (1, "target", "bce_target_range")):
        p = arg(args, kwargs, position, name)
        if plain(p) and p.is_floating_point():
            site = site_of(label, name, family, p, "[0, 1]", "binary_cross_entropy's domain")
            args, kwargs = with_arg(args, kwargs, position, name, unit_interval(site, p))
    return args, kwargs


def one_hot(label: str, args: tuple, kwargs: dict) -> Args:
    labels, classes = arg(args, kwargs, 0, "tensor"), arg(args, kwargs, 1, "num_classes", -1)
    if not integral(labels) or type(classes) is not int:
        return args, kwargs
    check_cast(label, "input", labels)
    if classes < 0:
        site = site_of(label, "input", "one_hot_num_classes", labels, ">= 0", "num_classes=-1 (inferred)")
        return with_arg(args, kwargs, 0, "tensor", non_negative(site, labels))
    safe = checked_index(label, "input", "one_hot_num_classes", labels, 0, classes, f"num_classes = {classes}")
    return with_arg(args, kwargs, 0, "tensor", safe)


def ctc_loss(label: str, args: tuple, kwargs: dict) -> Args:
    """Targets in [0, C) and not blank (the first target_lengths[i] of a padded row), input_lengths <= T,
    target_lengths <= S. Lengths given as lists are host values: checked on the host, raised at once."""
    log_probs, targets = arg(args, kwargs, 0, "log_probs"), arg(args, kwargs, 1, "targets")
    if not plain(log_probs) or not integral(targets):
        return args, kwargs
    blank = int(arg(args, kwargs, 4, "blank", 0))
    classes, steps = log_probs.size(-1), log_probs.size(0)
    limits = [(2, "input_lengths", steps, f"log_probs.shape[0] = {steps} (T)")]
    if targets.dim() == 2:
        limits.append((3, "target_lengths", targets.size(1), f"targets.shape[1] = {targets.size(1)}"))
    for position, name, high, source in limits:
        lengths = arg(args, kwargs, position, name)
        if integral(lengths):
            safe = checked_index(label, name, "ctc_loss", lengths, 0, high + 1, source)
            args, kwargs = with_arg(args, kwargs, position, name, safe)
        elif isinstance(lengths, (list, tuple)):
            _host_lengths(label, name, [int(v) for v in lengths], high, source)
    used = arg(args, kwargs, 3, "target_lengths") if targets.dim() == 2 else None
    site = site_of(
        label,
        "targets",
        "ctc_loss",
        targets,
        f"[0, {classes}) except blank={blank}",
        f"log_probs.shape[-1] = {classes} (C)",
    )
    return with_arg(args, kwargs, 1, "targets", ctc_labels(site, targets, used, classes, blank))


def _host_lengths(label: str, name: str, values: list[int], high: int, source: str) -> None:
    bad = [i for i, v in enumerate(values) if not 0 <= v <= high]
    if bad:
        raise host_violation(
            label,
            name,
            "ctc_loss",
            None,
            f"has {len(bad)} value(s) outside [0, {high}]",
            f"[0, {high}]",
            source,
            values=[values[i] for i in bad[:5]],
            positions=[(i,) for i in bad[:5]],
            count=len(bad),
        )
