"""What the user's code, read statically, says about the cause when no value is in reach (``explain --code``).

The other analysers read the user's objects and use the code to name them; these rules read the code alone:
labels shifted by one or a class count computed one short, a label constant stored beyond the class count, a new
padding token set on a tokenizer whose model is never resized, random ids drawn past a known checkpoint's
vocabulary, a ``max_length`` beyond its positions, and the ops whose own argument decides the family
(``one_hot(``, ``multinomial(``). A checkpoint's sizes come from its published config (``data/checkpoints.json``).

Each rule says which line it read (``Hint.text``); all are inferred evidence, weaker than a value read.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from typing import cast

from nb_cudaguard.diagnosis.evidence.static import Fact, StaticFacts, parse_source
from nb_cudaguard.diagnosis.evidence.textual import Hint

_LABEL_NAME = r"(?:\w*labels?|\w*targets?|\w*_y|y|\w*masks?|\w*classes)"
_SHIFTED_UP = re.compile(rf"\b{_LABEL_NAME}\b(?:\[[^\]]*\])?\s*(?:\+=\s*1\b|=\s*[\w.\[\]]*\s*\+\s*1\b)")
_SHIFTED_UP_USE = re.compile(rf"\b{_LABEL_NAME}\s*\+\s*1\b")
_SHIFTED_DOWN = re.compile(rf"\b{_LABEL_NAME}\s*(?:-=\s*1\b|-\s*1\b)")
# A name that holds the number of classes, in any case (``NUM_CLASSES = 196`` is the usual constant).
_COUNT_NAME = re.compile(
    r"^(?:num_classes|n_classes|nclasses|num_labels|n_labels|classes|nc|label_nc|num_class|n_class|nclass)$",
    re.IGNORECASE,
)
_COUNT_EXPRESSION = re.compile(r"^(?P<name>\w+)(?:\s*-\s*(?P<less>\d+))?$")
_COUNT_SHORT = re.compile(r"^\s*(\w+)\s*=\s*len\(.*\)\s*-\s*1\s*$", re.MULTILINE)
_PAD_LITERAL = re.compile(r"\.pad_token\s*=\s*[\"']")
_LABEL_CONTAINER = re.compile(r"label|target|mask|(?:^|_)y$|seg", re.IGNORECASE)


@lru_cache(maxsize=1)
def _checkpoints() -> dict[str, list[int]]:
    raw = resources.files("nb_cudaguard").joinpath("data/checkpoints.json").read_text()
    return dict(json.loads(raw)["checkpoints"])


def checkpoint_sizes(name: str) -> tuple[str, int, int, int] | None:
    """(matched name, vocab_size, usable positions, type_vocab_size) of the longest known name inside ``name``."""
    lowered = name.lower()
    known = [key for key in _checkpoints() if key in lowered]
    if not known:
        return None
    key = max(known, key=len)
    vocab, positions, types = _checkpoints()[key]
    return key, vocab, positions, types


def hints_for(sources: Iterable[str], facts: StaticFacts) -> list[Hint]:
    texts = [s for s in sources if s]
    if not texts:
        return []
    text = "\n".join(texts)
    hints = shifted(text) + _checkpoint(facts) + _ops(facts) + _class_heads(facts)
    if _PAD_LITERAL.search(text) and not facts.resized:
        line = _line_of(_PAD_LITERAL, text)
        hints.append(
            Hint("vocab_resize_missing", 0.55, f"`{line}` sets a new padding token and nothing resizes the model")
        )
    for source in texts:
        hints += _label_constants(source, facts)
    return [replace(hint, kind="source") for hint in hints]


def _line_of(pattern: re.Pattern[str], text: str) -> str:
    match = pattern.search(text)
    if match is None:
        return ""
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()[:100]


def shifted(text: str) -> list[Hint]:
    """Labels shifted by one, a class count one short: in ``--code`` or in the traceback's own lines."""
    hints = []
    for pattern in (_SHIFTED_UP, _SHIFTED_UP_USE):
        if pattern.search(text):
            line = _line_of(pattern, text)
            hints.append(
                Hint("label_out_of_range", 0.4, f"`{line}` shifts labels up by one: the last reaches the count")
            )
            break
    if _SHIFTED_DOWN.search(text):
        line = _line_of(_SHIFTED_DOWN, text)
        hints.append(Hint("negative_label", 0.35, f"`{line}` shifts labels down by one: a label 0 becomes -1"))
    short = next((m for m in _COUNT_SHORT.finditer(text) if _COUNT_NAME.match(m.group(1))), None)
    if short is not None:
        line = short.group(0).strip()
        hints.append(Hint("num_classes_mismatch", 0.45, f"`{line}` counts one class fewer than there are"))
    return hints


def _checkpoint(facts: StaticFacts) -> list[Hint]:
    """Random ids drawn past the loaded checkpoint's vocabulary; a ``max_length`` past its positions."""
    known = [(fact, checkpoint_sizes(str(fact.value))) for fact in facts.pretrained]
    found = [(fact, sizes) for fact, sizes in known if sizes is not None]
    if not found:
        return []
    _, (name, vocab, positions, _) = found[-1]
    hints = []
    for call in facts.called("randint"):
        node = call.value
        if not isinstance(node, ast.Call):
            continue
        bounds = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
        high = bounds[1] if len(bounds) >= 2 else bounds[0] if bounds else None
        if high is not None and high > vocab:
            said = f"`{call.line}` draws ids up to {high - 1}; {name} has {vocab} tokens"
            hints.append(Hint("embedding_index_out_of_range", 0.6, said))
    for fact in facts.passed_keywords.get("max_length", []):
        value = str(fact.value).replace("_", "")
        if value.isdigit() and int(value) > positions:
            said = f"`{fact.line}` asks for {value} tokens; {name} has {positions} positions"
            hints.append(Hint("position_ids_too_long", 0.55, said))
    return hints


_HEAD_KEYWORDS = frozenset({"num_labels", "config", "id2label", "label2id", "num_classes"})


def _class_heads(facts: StaticFacts) -> list[Hint]:
    """A classifier whose size nobody set: ``...ForSequenceClassification.from_pretrained(name)`` without
    ``num_labels`` (the head has the checkpoint's count, 2 for a base checkpoint); a last ``nn.Linear`` with fewer
    outputs than the class count the code declares, or a class-count keyword given a smaller number
    (``CarNet(num_classes=195)`` or ``num_classes=NUM_CLASSES - 1`` beside ``NUM_CLASSES = 196``)."""
    hints = []
    for call in facts.called("from_pretrained"):
        node = call.value
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        model = ast.unparse(node.func.value)
        if "Classification" in model and not _HEAD_KEYWORDS & {kw.arg for kw in node.keywords}:
            said = f"`{call.line}` builds a classifier without num_labels: its head keeps the checkpoint's count"
            hints.append(Hint("num_classes_mismatch", 0.45, said))
            break
    counts = [fact for name, fact in facts.assigned_ints.items() if _COUNT_NAME.match(name)]
    declared = max(counts, key=lambda fact: int(str(fact.value)), default=None)
    if declared is None:
        return hints
    if facts.linears:
        head = facts.linears[-1]
        outputs = cast(tuple[object, object], head.value)[1]
        if isinstance(outputs, int) and outputs < int(str(declared.value)):
            said = f"`{head.line}` has {outputs} outputs; `{declared.line}` declares {declared.value} classes"
            return [*hints, Hint("num_classes_mismatch", 0.5, said)]
    for keyword, passed in facts.passed_keywords.items():
        smaller = [f for f in passed if _COUNT_NAME.match(keyword) and _value(f, facts) < int(str(declared.value))]
        if smaller:
            said = f"`{smaller[-1].line}` passes {keyword}={smaller[-1].value}; `{declared.line}` declares it"
            return [*hints, Hint("num_classes_mismatch", 0.5, said)]
    return hints


def _value(fact: Fact, facts: StaticFacts) -> float:
    """A keyword's value where the code says it plainly (``195``, ``NUM_CLASSES - 1`` with ``NUM_CLASSES = 196``),
    else infinity: compared with nothing."""
    match = _COUNT_EXPRESSION.match(str(fact.value))
    if match is None:
        return float("inf")
    name, less = match["name"], int(match["less"] or 0)
    if name.isdigit():
        return int(name) - less
    known = facts.assigned_ints.get(name)
    return int(str(known.value)) - less if known is not None else float("inf")


def _ops(facts: StaticFacts) -> list[Hint]:
    """Ops whose own argument decides the family once the log names their group."""
    hints = []
    for names, family, what in (
        (("one_hot",), "one_hot_num_classes", "one_hot"),
        (("multinomial",), "multinomial_invalid_probs", "multinomial"),
        (("ctc_loss", "CTCLoss"), "ctc_loss", "a CTC loss"),
    ):
        calls = facts.called(*names)
        if calls:
            hints.append(Hint(family, 0.3, f"`{calls[-1].line}` calls {what}", group_only=True))
    return hints


def _label_constants(source: str, facts: StaticFacts) -> list[Hint]:
    """``labels[...] = 254`` with ``classes = 3``: a constant stored in a label container at or past a class count
    (and not the ignore_index the code declares)."""
    counts = {name: fact for name, fact in facts.assigned_ints.items() if _COUNT_NAME.match(name)}
    if not counts:
        return []
    ignored = {fact.value for fact in facts.keywords.get("ignore_index", [])}
    ignored |= {fact.value for name, fact in facts.assigned_ints.items() if "ignore" in name.lower()}
    tree = parse_source(source)
    if tree is None:
        return []
    count = min(counts.values(), key=lambda fact: int(str(fact.value)))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Subscript) or not _LABEL_CONTAINER.search(ast.unparse(target.value)):
            continue
        stored = value.value if isinstance(value, ast.Constant) and type(value.value) is int else None
        if stored is not None and stored >= int(str(count.value)) and stored not in ignored:
            said = f"`{ast.unparse(node)}` stores class {stored}; `{count.line}` declares {count.value} classes"
            return [Hint("label_out_of_range", 0.6, said)]
    return []
