"""The cause families, one row each: the only place a family's meaning, group and usual fix are written.

A group is what the GPU can say: ``srcIndex < srcSelectDimSize`` says "an embedding index was out of range", not
whether the tokenizer grew or the sequence was too long. The analysers refine a group into its family; the
ranking treats a family of the asserted group as consistent with the assertion and any other as contradicting it.

The catalog's error texts, the diagnosis and ``%%cudacheck`` all read their summary and fix from here, so a
family reads the same in every report. Texts about one op (a loss's class weights, bernoulli's probabilities)
stay next to that op.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One cause family. ``check_fix``: what ``%%cudacheck`` says instead of ``fix`` when it stops an op, where
    the check knows more than a report written after the failure."""

    name: str
    summary: str
    group: str
    fix: str
    check_fix: str | None = None
    # The family in a few words, for a line that names the families a log cannot tell apart ("labels out of range,
    # or a head too small for the classes").
    short: str = ""


TABLE: tuple[Family, ...] = (
    Family(
        "label_out_of_range",
        "a class label is negative or not smaller than the number of classes",
        "class_index",
        "Make every label lie in [0, num_classes) or equal ignore_index: labels numbered from 1 need `labels - 1`, "
        "class ids taken from the data need a map onto 0..C-1, and 'void' values such as 255 need ignore_index=255. "
        "Check on the CPU copy: labels.min() >= 0 and labels.max() < C.",
        check_fix="A label is not smaller than C, the number of classes the model outputs: remap the labels into "
        "[0, C) (labels numbered from 1 need `labels - 1`; 'void' values such as 255 need ignore_index=255), or, "
        "where the data really has more classes, give the head as many outputs (num_classes / num_labels / "
        "out_features = the largest label + 1).",
        short="labels out of range",
    ),
    Family(
        "negative_label",
        "a class label is negative (and not the loss's ignore_index)",
        "class_index",
        "A negative label is read as a class: padding or 'unknown' labels such as -1 need ignore_index=-1 in the "
        "loss (or mapping to -100, its default), and labels shifted by one from a 0-based set start at -1.",
        short="a negative label",
    ),
    Family(
        "num_classes_mismatch",
        "the output layer has fewer units than there are classes",
        "class_index",
        "The head has fewer outputs than there are classes: set num_classes / num_labels / out_features to the "
        "number of classes (the largest label + 1, counted over every split), and make a dataset config's class "
        "count match the data the model is trained on.",
        short="a head too small for the classes",
    ),
    Family(
        "embedding_index_out_of_range",
        "a token or index id is outside the embedding table",
        "embedding",
        "Keep ids in [0, num_embeddings): check the tokenizer and the model come from the same checkpoint, call "
        "model.resize_token_embeddings(len(tokenizer)) after adding tokens, or enlarge "
        "nn.Embedding(num_embeddings=...).",
        short="ids past the embedding table",
    ),
    Family(
        "vocab_resize_missing",
        "tokens were added to the tokenizer but the embedding was not resized",
        "embedding",
        "Tokens were added to the tokenizer but the embedding table was not resized: call "
        "model.resize_token_embeddings(len(tokenizer)).",
        short="added tokens without a resize",
    ),
    Family(
        "position_ids_too_long",
        "a sequence is longer than max_position_embeddings",
        "embedding",
        "The sequence is longer than max_position_embeddings: tokenize with truncation=True and "
        "max_length=model.config.max_position_embeddings, or shorten the inputs.",
        short="a sequence longer than the positions",
    ),
    Family(
        "token_type_ids_out_of_range",
        "token_type_ids hold a value >= type_vocab_size",
        "embedding",
        "token_type_ids must be < type_vocab_size (usually 2, or 1 for RoBERTa-style models): drop token_type_ids "
        "or build them with the model's own tokenizer.",
        short="token type ids past their table",
    ),
    Family(
        "bce_input_range",
        "binary cross-entropy got inputs outside [0, 1] (raw logits?)",
        "bce",
        "binary_cross_entropy expects probabilities: use nn.BCEWithLogitsLoss() (or "
        "F.binary_cross_entropy_with_logits) on the raw logits, or apply torch.sigmoid first; check the model "
        "output for NaN.",
        short="BCE inputs outside [0, 1]",
    ),
    Family(
        "bce_target_range",
        "binary cross-entropy got targets outside [0, 1]",
        "bce",
        "Scale or binarise the targets into [0, 1] (e.g. mask / 255 or (mask > 0).float()).",
        short="BCE targets outside [0, 1]",
    ),
    Family(
        "gather_scatter_index",
        "a gather/scatter index is outside the indexed dimension",
        "index",
        "Every entry of `index` must be in [0, self.size(dim)): gather/scatter do not wrap negative indices.",
        short="a gather/scatter index out of range",
    ),
    Family(
        "advanced_index_out_of_bounds",
        "an index is outside the tensor it indexes",
        "index",
        "Keep indices in the valid range of the indexed dimension (check idx.min() and idx.max() against its size).",
        short="an index out of bounds",
    ),
    Family(
        "one_hot_num_classes",
        "one_hot got a value outside [0, num_classes)",
        "index",
        "Pass num_classes larger than the largest label (or fix the labels), and make labels non-negative.",
        short="one_hot values past num_classes",
    ),
    Family(
        "multinomial_invalid_probs",
        "sampling got NaN, inf, negative or all-zero probabilities",
        "multinomial",
        "Sample from valid probabilities: compute softmax in float32, keep temperature > 0, make sure top-k/top-p "
        "filtering leaves at least one token per row, and find where NaN/inf entered the logits.",
        short="invalid sampling probabilities",
    ),
    Family(
        "ctc_loss",
        "CTC targets or lengths are invalid",
        "ctc",
        "CTC targets must be class indices in [0, C) other than blank; input_lengths <= T (log_probs.size(0)); "
        "target_lengths <= the padded target length (or summing to targets.numel() for concatenated targets).",
        short="invalid CTC targets or lengths",
    ),
    Family(
        "nan_or_inf",
        "a NaN or inf was turned into an index",
        "index",
        "A NaN (or inf) became an index: casting NaN to an integer gives -9223372036854775808. Find where it comes "
        "from (torch.isnan(x).any()), and clean or mask it before .long() or int().",
        # The check saw the cast itself, on a device where NaN becomes an arbitrary integer (0 on CUDA).
        check_fix="A NaN or inf was cast to an integer index: find where it enters (torch.isfinite(x).all()) "
        "before the cast.",
        short="a NaN cast to an index",
    ),
    Family(
        "illegal_memory_access",
        "a kernel touched memory it does not own (no tensor check catches this)",
        "memory",
        "Re-run with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel; check custom CUDA extensions "
        "and indices passed to ops without bounds checks.",
        short="an illegal memory access",
    ),
    Family(
        "dtype_mismatch",
        "an index or label tensor has the wrong dtype",
        "dtype",
        "Convert labels and indices with .long() (after checking they hold no NaN).",
        short="a label or index of the wrong dtype",
    ),
    Family(
        "other",
        "a CUDA kernel failed",
        "other",
        "Re-run the failing cell under %%cudacheck to see the op, its arguments and the offending values.",
        short="another kernel's failure",
    ),
)

FAMILIES: tuple[str, ...] = tuple(row.name for row in TABLE)
_BY_NAME = {row.name: row for row in TABLE}


def family(name: str) -> Family:
    """The row of ``name``; an unknown name reads as ``other``."""
    return _BY_NAME.get(name, _BY_NAME["other"])


def summary_of(name: str) -> str:
    return family(name).summary


def group_of(name: str) -> str:
    return family(name).group


def short_of(name: str) -> str:
    return family(name).short


def fix_of(name: str) -> str:
    """The family's usual fix, for a report that knows the family but nothing more specific."""
    return family(name).fix


def check_fix_of(name: str) -> str:
    """What ``%%cudacheck`` says to do when it stops an op for this family."""
    row = family(name)
    return row.check_fix or row.fix
