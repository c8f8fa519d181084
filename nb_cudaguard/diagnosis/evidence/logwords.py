"""What a log's words say about the family within a group: libraries' own warnings, the model it names, the user's
own traceback lines.

A pasted log often carries the warnings printed before the failure, and they were written for exactly these
mistakes: Hugging Face's tokenizer says ``Special tokens have been added in the vocabulary`` when tokens are added
(an embedding that is never resized then overflows); generation warns that a call ``will exceed the model's
predefined maximum length``; a classifier built from a base checkpoint lists its head as ``newly initialized``
(its size is the config's ``num_labels``, 2 unless passed); MMDetection says a head's ``num_classes`` ``does not
match the length of CLASSES``. The model a log names says which tables it has: LLaMA-style decoders (rotary or
ALiBi positions) have no position table and no token types, so an embedding overflow there is the word table,
and their tokenizers ship without a pad token, which fine-tuning scripts add; RoBERTa-family checkpoints have a
single token type. A known checkpoint's positions (``data/checkpoints.json``) against a ``max_length`` printed
in the log says the sequence is too long. The user's own traceback lines are read as ``--code`` is: labels shifted
by one (``criterion(out, labels - 1)``), a class count ``len(...) - 1``. An embedding called from the user's own
model, with no pretrained text model anywhere in the log, is a table whose ids nothing checked.

Each rule says which words it read (``Hint.text``); all are inferred evidence, weaker than a value read.
"""

from __future__ import annotations

import re
from dataclasses import replace

from nb_cudaguard.diagnosis.evidence import codehints
from nb_cudaguard.diagnosis.evidence.textual import Hint
from nb_cudaguard.incident.incident import Incident

# (family, pattern, weight, what it means): warnings and messages libraries print before or with the failure.
_WARNINGS = (
    (
        "vocab_resize_missing",
        r"Special tokens have been added in the vocabulary|Using pad_token, but it is not set yet"
        r"|Assigning \S+ to the pad_token key|\.add_special_tokens\(|\.add_tokens\(|\.pad_token\s*=\s*[\"']",
        0.5,
        "the log shows tokens added to the tokenizer (a new id the embedding has no row for unless resized)",
    ),
    (
        "position_ids_too_long",
        r"exceed the model's predefined maximum length|Input length of input_ids is \d+, but `?max_length`? is set to"
        r"|longer than the (?:specified )?maximum (?:sequence )?length",
        0.55,
        "a library warned that the sequence is longer than the model's positions",
    ),
    (
        "negative_label",
        r"\blabels?\b\s*(?:=|==|:|is|are|contains?|of)\s*-1\b|pad_token_label_id|label_pad_token_id",
        0.45,
        "the log shows labels of -1 or labels padded with a negative id",
    ),
    (
        "label_out_of_range",
        r"\b(?:ignore_label|void|unlabeled)\b[^\n]{0,30}\b255\b|\b255\b[^\n]{0,30}\b(?:ignore|void|unlabeled|boundary)",
        0.45,
        "the log names 255, the 'void' value of segmentation masks",
    ),
    (
        "num_classes_mismatch",
        r"newly initialized: \[[^\]]{0,200}\b(?:classifier|score|fc|head|logits|cls)\b",
        0.4,
        "the classification head was built fresh from the config (num_labels is 2 unless passed)",
    ),
    (
        "num_classes_mismatch",
        r"does not match(?:es)? the length of `?CLASSES|size mismatch for \S*(?:classifier|fc|head|cls_score|"
        r"class_embed|logits)\S*",
        0.55,
        "the log says the head's class count differs from the data's or the checkpoint's",
    ),
)
# Decoders with rotary or ALiBi positions: no position table, no token types, no pad token in the tokenizer.
_NO_POSITION_TABLE = re.compile(
    r"\b(?:llama|mistral|mixtral|qwen\d*|gemma|falcon|baichuan|chatglm|internlm|deepseek|bloom|mpt-\d|gpt-neox|"
    r"pythia|phi-[23])",
    re.IGNORECASE,
)
_FINE_TUNING = re.compile(r"\bpeft\b|\blora\b|\bqlora\b|fine-?tun|\bsft\b|\btrain", re.IGNORECASE)
_SINGLE_TYPE = re.compile(r"\b(?:roberta|camembert|xlm-r|longformer|phobert|bertweet)", re.IGNORECASE)
_PRETRAINED_TEXT = re.compile(
    r"transformers/|modeling_\w+|tokeniz|from_pretrained|\bbert|\bgpt|roberta|\bt5\b|\bbart\b|fairseq|\bllm\b",
    re.IGNORECASE,
)
_EMBEDDING_CALL = re.compile(r"\bembedding\(|Embedding\.forward|F\.embedding")
_MAX_LENGTH = re.compile(r"\b(?:max_length|max_len|max_seq_length|max_seq_len|seq_len|block_size)\s*[=:]\s*(\d+)")
_FRAMES_LOOKED_AT = 8
_GENERATE = re.compile(r"\.generate\(")
_SAMPLING = re.compile(r"do_sample|multinomial|top_p|top_k|temperature|\bsampl", re.IGNORECASE)


def hints_for(incident: Incident, named_groups: frozenset[str]) -> list[Hint]:
    """``named_groups``: the groups the assertion, the error text and the other hints already point at; the
    rules about embedding tables speak only when that group is named, or when nothing is."""
    text = incident.text
    hints = [Hint(f, w, m, kind="log") for f, p, w, m in _WARNINGS if re.search(p, text)]
    if not named_groups or "embedding" in named_groups:
        hints += _embedding_tables(incident)
    frames = [f for f in incident.frames[-_FRAMES_LOOKED_AT:] if f.is_user and f.line]
    if frames:
        lines = "\n".join(f.line for f in frames)
        hints += [replace(h, kind="traceback", text=f"{h.text} (the traceback)") for h in codehints.shifted(lines)]
    return hints


def _embedding_tables(incident: Incident) -> list[Hint]:
    text = incident.text
    hints = []
    decoder = _NO_POSITION_TABLE.search(text)
    if decoder is not None:
        model = decoder.group(0)
        if _FINE_TUNING.search(text):
            said = (
                f"the log trains {model}, whose tokenizer has no pad token: training scripts add one (or a new "
                "tokenizer), numbered past the embedding table unless the model is resized"
            )
            hints.append(Hint("vocab_resize_missing", 0.45, said, kind="log"))
        else:
            said = f"the log names {model}, which has no position or token-type table: the word table overflowed"
            hints.append(Hint("embedding_index_out_of_range", 0.4, said, kind="log"))
    single = _SINGLE_TYPE.search(text)
    if single is not None and "token_type_ids" in text:
        said = f"the log names {single.group(0)} (a single token type) and passes token_type_ids"
        hints.append(Hint("token_type_ids_out_of_range", 0.5, said, kind="log"))
    hints += _lengths(text)
    if decoder is None and _GENERATE.search(text) and not _SAMPLING.search(text):
        said = "the log generates without sampling: each step adds a position, past the table if nothing stops it"
        hints.append(Hint("position_ids_too_long", 0.35, said, kind="log"))
    frames = incident.frames[-_FRAMES_LOOKED_AT:]
    calls = "\n".join(f"{f.function} {f.line}" for f in frames)
    if (
        _EMBEDDING_CALL.search(calls)
        and decoder is None
        and not _PRETRAINED_TEXT.search("\n".join(f"{f.filename} {f.line}" for f in incident.frames) + text)
    ):
        said = "the embedding belongs to the user's own model (no pretrained text model in the log): ids past its rows"
        hints.append(Hint("embedding_index_out_of_range", 0.35, said, kind="traceback"))
    return hints


def _lengths(text: str) -> list[Hint]:
    """A ``max_length`` printed in the log past the positions of a known checkpoint the log names."""
    lengths = [int(v) for v in _MAX_LENGTH.findall(text)]
    if not lengths:
        return []
    named = codehints.checkpoint_sizes(text)
    if named is None:
        return []
    name, _, positions, _ = named
    longest = max(lengths)
    if longest <= positions:
        return []
    said = f"the log asks for {longest} tokens; {name} has {positions} positions"
    return [Hint("position_ids_too_long", 0.55, said, kind="log")]
