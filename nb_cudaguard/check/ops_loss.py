"""Losses with a device assert: class-index targets (NLL, cross-entropy, multi-margin), binary cross-entropy's
[0, 1] domain, and CTC's targets and lengths.

A class-index target out of range is reported as ``negative_label`` or ``label_out_of_range`` depending on which
end it falls off, decided from the same min/max the check already read.
"""

from __future__ import annotations

from typing import Any

import torch

from nb_cudaguard.check.conditions import (
    CastTracker,
    Condition,
    index_in_range,
    probabilities_in_unit_interval,
    usable,
)


def _class_conditions(mode: CastTracker, a: dict[str, Any], classes: int, source: str) -> list[Condition]:
    target = a["target"]
    ignore = a.get("ignore_index")
    conditions = mode.cast_conditions("target", target)
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
    found = index_in_range("target", target, 0, classes, "label_out_of_range", source, ignore=ignore)
    for cond in found:
        cond.classify = lambda s: "label_out_of_range" if s[1] >= classes else "negative_label"
    return conditions + found


def check_nll_loss(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t = a["self"]
    classes = t.size(-1) if t.dim() > 0 else 1
    return _class_conditions(mode, a, classes, f"input.shape[{max(t.dim() - 1, 0)}] (classes)")


def check_nll_loss2d(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    return _class_conditions(mode, a, a["self"].size(1), "input.shape[1] (classes)")


def check_multi_margin_loss(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    t = a["self"]
    classes = t.size(-1) if t.dim() > 0 else 1
    return _class_conditions(mode, a, classes, f"input.shape[{max(t.dim() - 1, 0)}] (classes)")


def check_bce(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    domain = "binary_cross_entropy's domain"
    return probabilities_in_unit_interval("input", a["self"], "bce_input_range", domain) + (
        probabilities_in_unit_interval("target", a["target"], "bce_target_range", domain)
    )


def check_ctc_loss(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    log_probs, targets, blank = a["log_probs"], a["targets"], int(a["blank"])
    if not usable(log_probs):
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
        return index_in_range(argument, lengths, low, high + 1, "ctc_loss", source)
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
        )
    ]


def _ctc_targets(targets, target_lengths, classes: int, blank: int) -> list[Condition]:
    """Targets in [0, C) and never blank, counting only the first target_lengths[i] entries of a padded row."""
    if not usable(targets) or targets.is_floating_point():
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
        )
    ]
