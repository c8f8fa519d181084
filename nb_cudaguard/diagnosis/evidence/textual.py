"""What the traceback and the log say about the failing op when no assertion line names it.

Notebook users rarely see the assertion line (it goes to the server's stderr) and the traceback often ends on an
innocent line (``loss.item()``), because CUDA reports kernel errors at the next synchronisation. The frames
above it, warnings printed earlier and old-format assertion conditions still point at the op: an
``embedding`` frame under ``position_embeddings``, a ``binary_cross_entropy`` call, a tokenizer warning about
sequences longer than the model's maximum. These hints are inferred evidence: weaker than a printed
assertion, stronger than nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nb_cudaguard.incident.incident import Incident

# Which embedding table a frame's line reads: only the innermost line that names exactly one of them counts,
# because an outer line such as ``self.embeddings(input_ids=..., position_ids=..., token_type_ids=...)`` names all.
_EMBEDDING_ROLES = (
    (
        "position_ids_too_long",
        r"position_embeddings|embed_positions|position_ids|pos_emb",
        0.55,
        "the innermost embedding frame reads the position embeddings",
    ),
    (
        "token_type_ids_out_of_range",
        r"token_type_embeddings|token_type_ids|segment_ids|seg_ids",
        0.55,
        "the innermost embedding frame reads the token-type embeddings",
    ),
    (
        "embedding_index_out_of_range",
        r"word_embeddings|embed_tokens|\bwte\b|tok_embeddings|input_ids",
        0.45,
        "the innermost embedding frame reads the word embeddings",
    ),
)
# (family, pattern, weight, what it means): frame patterns look at the code lines and function names of the
# innermost frames; text patterns at the whole log. Frame hints of a family in _GROUP_ONLY name the op's group.
_FRAME_HINTS = (
    (
        "embedding_index_out_of_range",
        # an embedding layer's own sum of its lookups (``inputs_embeds + position_embeddings + ...``) follows them
        r"\bembedding\(|Embedding\.forward|F\.embedding|\bembeddings?\(|\w*embed\w* \+ \w*embeddings\b",
        0.4,
        "the failing frames call an embedding",
    ),
    (
        "bce_input_range",
        r"binary_cross_entropy(?!_with)|BCELoss|bce_loss",
        0.45,
        "the failing frames call binary cross-entropy",
    ),
    (
        "label_out_of_range",
        r"cross_entropy|nll_loss|CrossEntropyLoss|NLLLoss|criterion\(|loss_fct\(",
        0.4,
        "the failing frames compute a classification loss",
    ),
    (
        "multinomial_invalid_probs",
        r"multinomial|\bsample\(|top_p|top_k",
        0.4,
        "the failing frames sample from a distribution",
    ),
    ("one_hot_num_classes", r"one_hot", 0.5, "the failing frames call one_hot"),
    ("gather_scatter_index", r"\bgather\(|scatter_?\(|scatter_add", 0.45, "the failing frames gather or scatter"),
    ("ctc_loss", r"ctc_loss|CTCLoss", 0.6, "the failing frames compute a CTC loss"),
)
_GROUP_ONLY = ("embedding_index_out_of_range", "label_out_of_range", "bce_input_range")
_TEXT_HINTS = (
    (
        "position_ids_too_long",
        r"Token indices sequence length is longer than the specified maximum",
        0.6,
        "the tokenizer warned that a sequence is longer than the model's maximum",
    ),
    (
        "position_ids_too_long",
        r"max_position_embeddings|sequence length .{0,40}(longer|exceed)",
        0.35,
        "the log mentions the maximum sequence length",
    ),
    (
        "vocab_resize_missing",
        r"resize_token_embeddings|len\(tokenizer\)|added tokens?",
        0.35,
        "the log mentions added tokens or resize_token_embeddings",
    ),
    ("ctc_loss", r"input_lengths|target_lengths|ctc", 0.6, "the error is about CTC lengths"),
    (
        "bce_input_range",
        r"Assertion `\*?input >= 0\. && \*?input <= 1\.` failed",
        0.9,
        "the old (THCUNN) binary cross-entropy assertion on the input",
    ),
    (
        "bce_target_range",
        r"Assertion `\*?target >= 0\. && \*?target <= 1\.` failed",
        0.9,
        "the old (THCUNN) binary cross-entropy assertion on the target",
    ),
    (
        "nan_or_inf",
        # whole words only: autograd names in printed tensors (grad_fn=<IndexBackward0>) are not an index
        r"-9223372036854775808|\bnan\b.{0,30}\bindex\b|\bindex\b.{0,30}\bnan\b",
        0.5,
        "a NaN cast to an integer index shows up as -9223372036854775808",
    ),
    (
        "dtype_mismatch",
        r"expected scalar type Long|must be long|one of the following scalar types",
        0.5,
        "an index or label has a floating dtype",
    ),
    ("dtype_mismatch", r"expected target dtype", 0.5, "a class-index target has a floating dtype"),
    (
        "position_ids_too_long",
        r"The expanded size of the tensor \(\d+\) must match the existing size \(\d+\)",
        0.6,
        "a buffer of max_position_embeddings entries (position or token-type ids) is shorter than the sequence",
    ),
    (
        "embedding_index_out_of_range",
        r"Tried to access index -?\d+ out of table with \d+ rows",
        0.8,
        "an id beyond the embedding table (the pre-1.5 CPU message)",
    ),
)


@dataclass
class Hint:
    """``group_only``: the hint names the op, hence the group (an embedding call, a classification loss), not
    which family of the group: it must not outrank what narrows the group (a frame, a number, the code)."""

    family: str
    weight: float
    text: str
    group_only: bool = False
    kind: str = "traceback"  # the evidence it becomes: "traceback", "log" (numbers printed in it), "source" (code)


_FRAMES_LOOKED_AT = 8


def hints_for(incident: Incident) -> list[Hint]:
    hints: dict[str, Hint] = {}
    frames = incident.frames[-_FRAMES_LOOKED_AT:]
    for frame in reversed(frames):
        roles = [r for r in _EMBEDDING_ROLES if re.search(r[1], frame.line)]
        if len(roles) == 1:
            family, _, weight, meaning = roles[0]
            _keep(hints, Hint(family, weight, f"{meaning} (`{frame.line.strip()[:80]}`)"))
            break
    frame_text = "\n".join(f"{f.function} {f.line}" for f in frames)
    for family, pattern, weight, meaning in _FRAME_HINTS:
        match = re.search(pattern, frame_text)
        if match:
            text = f"{meaning} (`{match.group(0)}` in the traceback)"
            _keep(hints, Hint(family, weight, text, group_only=family in _GROUP_ONLY))
    for family, pattern, weight, meaning in _TEXT_HINTS:
        if re.search(pattern, incident.text, re.IGNORECASE):
            _keep(hints, Hint(family, weight, meaning))
    return list(hints.values())


def _keep(hints: dict[str, Hint], hint: Hint) -> None:
    known = hints.get(hint.family)
    if known is None or known.weight < hint.weight:
        hints[hint.family] = hint
