"""What the numbers printed in a log say: an id against the table it indexes, labels against the class count.

A pasted log often carries more than its error line: PyTorch's own messages print the index and the size it
broke (``index 50265 is out of bounds for dimension 0 with size 50265``, ``Tried to access index 250004 out of
table with 250001 rows``), printed models show their tables and heads (``(word_embeddings): Embedding(30522,
768)``, ``Linear(in_features=768, out_features=2)``), printed configs their sizes (``"max_position_embeddings":
512``, ``num_labels``), and users print a batch (``labels: tensor([1, 2, 3])``). The kernel that asserted says
how many indices it had: PyTorch's index_select launches ``indexSelectSmallIndex`` only for at most 16 indices
(``Indexing.cu``, every release since THC), which a batch of token or position ids never is.

Each rule compares numbers from the log only, and says which numbers it compared (``Hint.text``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from nb_cudaguard.diagnosis.evidence.textual import Hint
from nb_cudaguard.incident.incident import Incident

_INT = r"-?\d+"
# PyTorch's messages that print the id and the size of what it indexed (CPU kernels and host-side checks). A table
# is looked up along its rows, dimension 0: an index past another dimension is not a table's id.
_ID_AGAINST_SIZE = (
    re.compile(rf"index ({_INT}) is out of bounds for dimension 0 with size (\d+)"),
    re.compile(rf"Tried to access index ({_INT}) out of table with (\d+) rows"),
)
# A printed module: ``(name): Embedding(rows, dim`` and a printed head ``(name): Linear(in_features=.., out_features=K``
_EMBEDDING_REPR = re.compile(r"\((\w+)\): Embedding\((\d+), \d+")
_LINEAR_REPR = re.compile(r"\((\w+)\): Linear\(in_features=\d+, out_features=(\d+)")
_CONFIG_SIZE = re.compile(
    r"[\"']?\b(vocab_size|n_vocab|max_position_embeddings|n_positions|type_vocab_size|num_labels|num_classes|"
    r"n_classes)\b[\"']?\s*[:=]\s*(\d+)"
)
_ROLE_OF_TABLE = (
    ("position", r"position|pos_emb|wpe|embed_positions"),
    ("token_type", r"token_type|segment"),
    ("word", r"word|wte|embed_tokens|tok_emb"),
)
_ROLE_OF_CONFIG = {
    "vocab_size": "word",
    "n_vocab": "word",
    "max_position_embeddings": "position",
    "n_positions": "position",
    "type_vocab_size": "token_type",
}
_CLASSIFIER_HEAD = re.compile(r"classifier|class|cls|head|fc|logits|out", re.IGNORECASE)
# A printed batch: ``labels: tensor([...])``, ``targets = tensor([[...]])``, ``'labels': tensor(...)``
_PRINTED = re.compile(
    r"[\"']?\b(labels?|targets?|input_ids)\b[\"']?\s*[:=]?\s*tensor\(\s*(\[[\d\s,\[\].\-]*\])", re.IGNORECASE
)
_TOKEN_TYPES = re.compile(r"token_type|type_vocab_size|segment_ids", re.IGNORECASE)
_SMALL_INDEX = re.compile(r"indexSelectSmallIndex")
_GENERATION = re.compile(r"\bgenerat|pipeline|\bsample\(|sampling|do_sample|past_key_values", re.IGNORECASE)
_IGNORE_DEFAULT = -100  # cross_entropy's and nll_loss's default ignore_index


@dataclass
class Numbers:
    """The sizes and values a log prints. ``tables``: role ("word", "position", "token_type") -> sizes."""

    ids_against_sizes: list[tuple[int, int]] = field(default_factory=list)
    tables: dict[str, set[int]] = field(default_factory=dict)
    class_counts: list[tuple[int, str]] = field(default_factory=list)  # (count, where it was printed)
    labels: list[int] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    token_types_named: bool = False  # the log names token types at all (a 2-row table is not one by its size alone)


def read_numbers(text: str) -> Numbers:
    numbers = Numbers(token_types_named=bool(_TOKEN_TYPES.search(text)))
    for pattern in _ID_AGAINST_SIZE:  # a message is often printed twice (the log line and the exception)
        pairs = [(int(i), int(s)) for i, s in pattern.findall(text)]
        numbers.ids_against_sizes += [p for p in dict.fromkeys(pairs) if p not in numbers.ids_against_sizes]
    for name, rows in _EMBEDDING_REPR.findall(text):
        role = next((r for r, p in _ROLE_OF_TABLE if re.search(p, name, re.IGNORECASE)), None)
        if role is not None:
            numbers.tables.setdefault(role, set()).add(int(rows))
    for key, value in _CONFIG_SIZE.findall(text):
        if key in _ROLE_OF_CONFIG:
            numbers.tables.setdefault(_ROLE_OF_CONFIG[key], set()).add(int(value))
        else:
            numbers.class_counts.append((int(value), f"{key} = {value}"))
    for name, count in _LINEAR_REPR.findall(text):
        if _CLASSIFIER_HEAD.search(name):
            numbers.class_counts.append((int(count), f"({name}): Linear(out_features={count})"))
    for name, values in _PRINTED.findall(text):
        ints = [int(float(v)) for v in re.findall(r"-?\d+(?:\.\d+)?", values)]
        (numbers.input_ids if name.lower() == "input_ids" else numbers.labels).extend(ints)
    return numbers


def hints_for(incident: Incident) -> list[Hint]:
    numbers = read_numbers(incident.text)
    hints = _ids_against_sizes(numbers) + _ids_against_tables(numbers) + _labels(numbers)
    if _SMALL_INDEX.search(incident.text):
        hints.append(_small_index(incident))
    return [replace(hint, kind="log") for hint in hints]


def _ids_against_sizes(numbers: Numbers) -> list[Hint]:
    """An id PyTorch printed next to the size of the table it broke."""
    hints = []
    for index, size in numbers.ids_against_sizes:
        said = f"the log prints index {index} against a size of {size}"
        role = next((r for r, sizes in numbers.tables.items() if size in sizes), None)
        if role == "position":
            hints.append(Hint("position_ids_too_long", 0.7, f"{said}, the printed position table's size"))
        elif role == "token_type" or (size in (1, 2) and index >= size and numbers.token_types_named):
            hints.append(
                Hint("token_type_ids_out_of_range", 0.6, f"{said}: a table of 1 or 2 rows is a token-type table")
            )
        elif index == size and size >= 1000:
            hints.append(
                Hint(
                    "vocab_resize_missing",
                    0.55,
                    f"{said}: the id equals the table size, the id a first added token gets (new tokens are "
                    "numbered from the old vocabulary's size)",
                )
            )
        elif role == "word" or index < 0 or size >= 1000:
            hints.append(Hint("embedding_index_out_of_range", 0.55, f"{said}: a token id beyond the vocabulary"))
    return hints


def _ids_against_tables(numbers: Numbers) -> list[Hint]:
    """A printed batch of input_ids against a printed vocabulary size or word-embedding table."""
    vocab = min(numbers.tables.get("word", set()), default=None)
    if not numbers.input_ids or vocab is None:
        return []
    top, low = max(numbers.input_ids), min(numbers.input_ids)
    said = f"the printed input_ids reach {top if top >= vocab else low} against a vocabulary of {vocab}"
    if top == vocab:
        return [Hint("vocab_resize_missing", 0.6, f"{said}: the id a first added token gets")]
    if top > vocab or low < 0:
        return [Hint("embedding_index_out_of_range", 0.6, said)]
    return []


def _labels(numbers: Numbers) -> list[Hint]:
    """A printed batch of labels against a printed class count (a head, num_labels), or against the values a class
    index may never take (negative other than ignore_index's default -100; 255, the usual 'void' value)."""
    if not numbers.labels:
        return []
    values = [v for v in numbers.labels if v != _IGNORE_DEFAULT]
    if not values:
        return []
    low, top = min(values), max(values)
    if low < 0:
        return [Hint("negative_label", 0.6, f"the printed labels hold {low}, a negative class index")]
    if not numbers.class_counts:
        if top == 255:
            return [Hint("label_out_of_range", 0.5, "the printed labels hold 255, the usual 'void' value")]
        return []
    count, where = min(numbers.class_counts)
    said = f"the printed labels reach {top} against {count} classes (`{where}`)"
    if top < count:
        return []
    if (top == 255 and count < 255) or (low >= 1 and top == count):
        why = "255 is a 'void' value" if top == 255 else "labels numbered from 1"
        return [Hint("label_out_of_range", 0.6, f"{said}: {why}")]
    return [Hint("num_classes_mismatch", 0.55, f"{said}: the head has fewer outputs than the labels use")]


def _small_index(incident: Incident) -> Hint:
    """``indexSelectSmallIndex`` runs for at most 16 indices: one decoding step of a generation loop (where the
    sampled token comes from the model's own vocabulary, but the position grows each step) or a per-sample id
    (speaker, user, class), never a batch of token ids."""
    kernel = "indexSelectSmallIndex asserted, which PyTorch runs for at most 16 indices"
    if _GENERATION.search(incident.text) or any(_GENERATION.search(f.function) for f in incident.frames):
        return Hint("position_ids_too_long", 0.5, f"{kernel}: one decoding step, whose position grows each step")
    return Hint("embedding_index_out_of_range", 0.5, f"{kernel}: a per-sample id table, not a batch of tokens")
