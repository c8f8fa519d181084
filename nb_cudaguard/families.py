"""The cause families: what each means in one line, and which families one printed assertion cannot tell apart.

A group is what the GPU can say: ``srcIndex < srcSelectDimSize`` says "an embedding index was out of range", not
whether the tokenizer grew or the sequence was too long. The analysers refine a group into its family; the
ranking treats a family of the asserted group as consistent with the assertion and any other as contradicting it.
"""

from __future__ import annotations

SUMMARY = {
    "label_out_of_range": "a class label is negative or not smaller than the number of classes",
    "negative_label": "a class label is negative (and not the loss's ignore_index)",
    "num_classes_mismatch": "the output layer has fewer units than there are classes",
    "embedding_index_out_of_range": "a token or index id is outside the embedding table",
    "vocab_resize_missing": "tokens were added to the tokenizer but the embedding was not resized",
    "position_ids_too_long": "a sequence is longer than max_position_embeddings",
    "token_type_ids_out_of_range": "token_type_ids hold a value >= type_vocab_size",
    "bce_input_range": "binary cross-entropy got inputs outside [0, 1] (raw logits?)",
    "bce_target_range": "binary cross-entropy got targets outside [0, 1]",
    "gather_scatter_index": "a gather/scatter index is outside the indexed dimension",
    "advanced_index_out_of_bounds": "an index is outside the tensor it indexes",
    "one_hot_num_classes": "one_hot got a value outside [0, num_classes)",
    "multinomial_invalid_probs": "sampling got NaN, inf, negative or all-zero probabilities",
    "ctc_loss": "CTC targets or lengths are invalid",
    "nan_or_inf": "a NaN or inf was turned into an index",
    "illegal_memory_access": "a kernel touched memory it does not own (no tensor check catches this)",
    "dtype_mismatch": "an index or label tensor has the wrong dtype",
    "other": "a CUDA kernel failed",
}

GROUP = {
    "label_out_of_range": "class_index",
    "negative_label": "class_index",
    "num_classes_mismatch": "class_index",
    "embedding_index_out_of_range": "embedding",
    "vocab_resize_missing": "embedding",
    "position_ids_too_long": "embedding",
    "token_type_ids_out_of_range": "embedding",
    "advanced_index_out_of_bounds": "index",
    "gather_scatter_index": "index",
    "one_hot_num_classes": "index",
    "nan_or_inf": "index",
    "bce_input_range": "bce",
    "bce_target_range": "bce",
    "multinomial_invalid_probs": "multinomial",
    "ctc_loss": "ctc",
    "dtype_mismatch": "dtype",
    "illegal_memory_access": "memory",
    "other": "other",
}


def summary_of(family: str) -> str:
    return SUMMARY.get(family, SUMMARY["other"])


def group_of(family: str) -> str:
    return GROUP.get(family, "other")
