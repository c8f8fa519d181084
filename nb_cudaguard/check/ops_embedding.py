"""Embedding lookups and their backward passes: every id within the table, EmbeddingBag's offsets in order.

When an id is out of range, the table's owner is looked up among the user's modules, which tells the families of
the embedding group apart: a position table means the sequence is too long, a token-type table a bad
token_type_ids, a word table smaller than a tokenizer in reach a missing ``resize_token_embeddings``.
"""

from __future__ import annotations

from typing import Any

from nb_cudaguard.check.conditions import (
    CastTracker,
    Condition,
    as_stats,
    index_in_range,
    offsets_out_of_order,
    usable,
)


def embedding_refine(weight):
    def refine(cond: Condition, names) -> None:
        owner = names.owner_of_weight(weight)
        if owner is None:
            return
        path, module = owner
        size = getattr(module, "num_embeddings", weight.shape[0])
        cond.range_source = f"{path}.num_embeddings = {size}"
        lowered = path.lower()
        if "position" in lowered:
            cond.family = "position_ids_too_long"
        elif "token_type" in lowered:
            cond.family = "token_type_ids_out_of_range"
        else:
            larger = [(name, n) for name, n in names.tokenizers() if n > size]
            if larger:
                name, n = larger[0]
                cond.family = "vocab_resize_missing"
                cond.range_source += f"; len({name}) = {n}"

    return refine


def _embedding_ids(mode: CastTracker, argument, indices, rows: int, source: str, weight=None) -> list[Condition]:
    refine = embedding_refine(weight) if weight is not None else None
    return mode.cast_conditions(argument, indices) + index_in_range(
        argument, indices, 0, rows, "embedding_index_out_of_range", source, refine=refine
    )


def check_embedding(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    weight = a["weight"]
    return _embedding_ids(mode, "indices", a["indices"], weight.shape[0], "weight.shape[0]", weight)


def check_embedding_renorm(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    weight = a["self"]
    return _embedding_ids(mode, "indices", a["indices"], weight.shape[0], "weight.shape[0]", weight)


def check_embedding_backward(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    return _embedding_ids(mode, "indices", a["indices"], int(a["num_weights"]), "num_weights (the embedding's rows)")


def check_embedding_bag(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    weight, indices, offsets = a["weight"], a["indices"], a.get("offsets")
    conditions = _embedding_ids(mode, "indices", indices, weight.shape[0], "weight.shape[0]", weight)
    return conditions + _bag_offsets(offsets, indices.numel())


def check_embedding_bag_backward(mode: CastTracker, a: dict[str, Any]) -> list[Condition]:
    rows = int(a["num_weights"]) if "num_weights" in a else a["weight"].shape[0]
    return _embedding_ids(mode, "indices", a["indices"], rows, "num_weights (the embedding's rows)")


def _bag_offsets(offsets, length: int) -> list[Condition]:
    """Offsets start at >= 0, never decrease, and end within the input: EmbeddingBag.cu asserts ``end >= begin``."""
    if not usable(offsets) or offsets.dim() != 1:
        return []
    steps = offsets[1:] - offsets[:-1] if offsets.numel() > 1 else offsets.new_zeros(1)
    stats = as_stats(offsets[0], steps.min(), offsets[-1])

    def bad_mask():
        return offsets_out_of_order(offsets, length)

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
