"""Turn an Incident into ranked causes.

The first evidence source is the catalog: the printed assertion condition and the error text each point at a
family. Several hits for one family add up; the best-supported family comes first.
"""

from __future__ import annotations

from . import catalog
from .causes import Cause, Diagnosis, Evidence
from .incident import Incident

_SUMMARY = {
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


def summary_of(family: str) -> str:
    return _SUMMARY.get(family, _SUMMARY["other"])


def diagnose(incident: Incident) -> Diagnosis:
    by_family: dict[str, Cause] = {}
    for hit in catalog.hits_for(incident.text, incident.assertions):
        evidence = Evidence(kind=hit.source, text=hit.detail, direct=True)
        cause = by_family.get(hit.family)
        if cause is None:
            by_family[hit.family] = Cause(
                family=hit.family,
                confidence=hit.confidence,
                summary=summary_of(hit.family),
                fix=hit.fix,
                evidence=[evidence],
            )
        else:
            cause.confidence = 1 - (1 - cause.confidence) * (1 - hit.confidence)
            cause.evidence.append(evidence)
    causes = sorted(by_family.values(), key=lambda c: (c.family == "other", -c.confidence))
    diagnosis = Diagnosis(causes=causes)
    frame = incident.user_frame
    if frame is not None and incident.classification == "poisoned":
        diagnosis.notes.append(
            f"CUDA reports kernel errors asynchronously: the op that failed may run before {frame.where}."
        )
    return diagnosis
