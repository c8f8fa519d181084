"""A cause as the report words it (its line, its evidence rows), and the report's first sentence: what is wrong,
in the user's own variable, against what, and the fix.

A user reads ten seconds of a panel: the one sentence worth that time says which of their values breaks which limit
(``labels`` holds 195; ``model.classifier`` has 195 outputs) and what to change. It is worded from the top cause's
structured evidence (the values, their count, the valid range and where the range comes from), never from its
run-on text, so every number in it is one the diagnosis read. The notebook's own name for the values (``labels``
rather than the loop's ``yb``) comes from ``panel.owner``, read while the failing process is alive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nb_cudaguard import families

SHOWN = 3  # distinct offending values quoted in the sentence
_INTERVAL = re.compile(r"^\[(-?\d+), (-?\d+)([)\]])")
_LONGEST = re.compile(r"^length <= (\d+)$")
_PATH = re.compile(r"^[A-Za-z_][\w.]*(\[\d+\])?$")
# How a range's source reads as a fact about the user's object: the attribute that bounds it -> the words.
_BOUNDS = {".out_features": "outputs", ".num_embeddings": "rows", ".num_classes": "classes"}


@dataclass(frozen=True)
class EvidenceRow:
    """One fact behind a cause: its sentence, and the values and range it quotes (which the headline words)."""

    text: str
    inferred: bool
    variable: str | None = None
    values: tuple = ()  # the first offending values (content.VALUES_SHOWN of them)
    count: int | None = None  # how many break the range, in all
    valid_range: str | None = None  # "[0, 195)", "[0, 1]", "length <= 16", "int64 (Long)"
    range_source: str | None = None  # where the range comes from: "model.classifier.out_features"

    @property
    def line(self) -> str:
        return self.text + (" (inferred)" if self.inferred else "")


@dataclass(frozen=True)
class CauseLine:
    family: str
    variable: str | None
    confidence: str  # "87%"
    summary: str
    fix: str
    evidence: tuple[EvidenceRow, ...]

    @property
    def title(self) -> str:
        """The cause as a person would name it: its family's summary, as a sentence (the identifier is for
        tools and issues)."""
        known = families.summary_of(self.family) if self.family in families.FAMILIES else ""
        text = known or self.summary or self.family.replace("_", " ")
        return text[:1].upper() + text[1:]

    @property
    def tag(self) -> str:
        """The grey tag after a cause: its confidence and its family's identifier, which is for tools and issues
        and never heads or starts a sentence a user reads."""
        return f"{self.confidence} · {self.family}"


@dataclass(frozen=True)
class Headline:
    """``problem`` and ``fix`` are sentences; code in them stands in backticks (the HTML renders it as code)."""

    problem: str
    fix: str


def headline_of(cause: CauseLine, owner: str | None = None) -> Headline:
    return Headline(_problem(cause, owner), cause.fix)


def _problem(cause: CauseLine, owner: str | None) -> str:
    variable = cause.variable
    name = owner or variable
    who = f"`{name}`" if name else "The input"
    if owner and variable and owner != variable:
        who += f" (as `{variable}` in the failing line)"
    row = next((r for r in cause.evidence if r.valid_range), None)
    if row is None or row.valid_range is None:
        return f"{cause.title} in {who}." if name else f"{cause.title}."
    against = next((_against(r) for r in cause.evidence if _bound(r)), "") or _against(row)
    valid = row.valid_range
    if not row.values:
        return f"{cause.title} in {who}: it must be {valid}{f' ({against})' if against else ''}."
    shown = ", ".join(_fmt(v) for v in _distinct(row.values)[:SHOWN])
    if valid.startswith("length"):
        found = f"{who} is {shown} long; the model allows {valid}"
    elif (row.count or len(row.values)) == 1:
        found = f"{who} holds {shown}, outside {valid}"
    else:
        found = f"{who} has {row.count or len(row.values)} values outside {valid}, such as {shown}"
    return f"{found}{f': {against}' if against else ''}."


def _bound(row: EvidenceRow) -> str | None:
    """The user's attribute that bounds a row's interval ("out_features" of ``model.classifier``), if it names one."""
    source = _path(row.range_source or "")
    return next((a for a in _BOUNDS if source.endswith(a)), None) if _interval(row) is not None else None


def _against(row: EvidenceRow) -> str:
    """Where the range comes from, as a fact: "`model.classifier` has 195 outputs", "`logits.shape[1]` is 2"."""
    source = _path(row.range_source or "")
    size = _interval(row)
    if not row.range_source:
        return ""
    if size is None or not _PATH.match(source):
        return f"the range comes from `{row.range_source}`"
    attribute = _bound(row)
    if attribute is not None:
        words = _BOUNDS[attribute] if size != 1 else _BOUNDS[attribute].removesuffix("s")
        return f"`{source[: -len(attribute)]}` has {size} {words}"
    return f"`{source}` is {size}"


def _path(source: str) -> str:
    """A range's source without the words after it: "input.shape[1] (classes)" -> "input.shape[1]"."""
    return source.split(" (", 1)[0].strip()


def _interval(row: EvidenceRow) -> int | None:
    """How many values the row's range allows from its start: an interval "[0, 195)" ("... or -100" after it), a
    longest length "length <= 16"."""
    match = _INTERVAL.match(row.valid_range or "")
    if match is not None:
        return int(match.group(2)) + (1 if match.group(3) == "]" else 0)
    longest = _LONGEST.match(row.valid_range or "")
    return int(longest.group(1)) if longest is not None else None


def _distinct(values: tuple) -> list:
    """The values once each, smallest first where they compare."""
    once = list(dict.fromkeys(values))
    try:
        return sorted(once)
    except TypeError:
        return once


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
