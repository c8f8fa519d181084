"""The report's first sentence: what is wrong, in the user's own variable, against what, and the fix.

A user reads ten seconds of a panel: the one sentence worth that time says which of their values breaks which limit
(``labels`` holds 195; ``model.classifier`` has 195 outputs) and what to change. It is worded from the top cause's
structured evidence (the values, their count, the valid range and where the range comes from), never from its
run-on text, so every number in it is one the diagnosis read. The notebook's own name for the values (``labels``
rather than the loop's ``yb``) comes from ``panel.owner``, read while the failing process is alive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nb_cudaguard.panel.content import CauseLine, EvidenceRow

SHOWN = 3  # distinct offending values quoted in the sentence
_INTERVAL = re.compile(r"^\[(-?\d+), (-?\d+)[)\]]$")
_PATH = re.compile(r"^[A-Za-z_][\w.]*(\[\d+\])?$")
# How a range's source reads as a fact about the user's object: the attribute that bounds it -> the words.
_BOUNDS = {".out_features": "outputs", ".num_embeddings": "rows", ".num_classes": "classes"}


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
    against = _against(row)
    valid = row.valid_range
    if not row.values:
        return f"{cause.title} in {who}: it must be {valid}{f' ({against})' if against else ''}."
    shown = ", ".join(_fmt(v) for v in list(dict.fromkeys(row.values))[:SHOWN])
    if valid.startswith("length"):
        found = f"{who} is {shown} long; the model allows {valid}"
    elif (row.count or len(row.values)) == 1:
        found = f"{who} holds {shown}, outside {valid}"
    else:
        found = f"{who} has {row.count or len(row.values)} values outside {valid}, such as {shown}"
    return f"{found}{f': {against}' if against else ''}."


def _against(row: EvidenceRow) -> str:
    """Where the range comes from, as a fact: "`model.classifier` has 195 outputs", "`logits.shape[1]` is 2"."""
    source = row.range_source
    if not source:
        return ""
    interval = _INTERVAL.match(row.valid_range or "")
    if interval is None or not _PATH.match(source):
        return f"the range comes from `{source}`"
    size = int(interval.group(2)) + (1 if (row.valid_range or "").endswith("]") else 0)
    for attribute, words in _BOUNDS.items():
        if source.endswith(attribute):
            return f"`{source[: -len(attribute)]}` has {size} {words}"
    return f"`{source}` is {size}"


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
