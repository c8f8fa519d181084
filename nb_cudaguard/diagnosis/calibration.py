"""From a ranking's scores to probabilities that mean what they say, and that add up to at most 100 %.

The engine's scores combine evidence as independent odds, which ranks well but overstates: on the corpus's dev half
answers scored 90 % and more were right far less often than that, and how often depends on what the answer rests
on. A printed assertion names its group, not always the family (an index assertion of a head too small); a family
narrowed by the log's words or the code was right more often; a family put first by the prior alone is right as
often as the prior says, no more. So the top cause's score is mapped through the curve of its kind of answer
(``data/calibration.json``), each fitted on the dev half only by ``tools/fit_calibration.py``: how often an answer
of that kind and score was right there. An answer that rests on the prior alone is then capped at what the prior
supports (its share of the symptom's causes, or of its group's once the group is printed). An answer backed by a
value read on the host or a healthy device is not what the curves measured (no log of the corpus has one) and keeps
its score. The causes of one report are exclusive (one of them failed), so the ones after the first share what the
first leaves, never more; the rest is "something else".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources

from nb_cudaguard.diagnosis.causes import Cause
from nb_cudaguard.diagnosis.evidence.prior import Prior

__all__ = ["KINDS", "Curve", "answer_kind", "disabled", "exclusive", "fit", "prior_support"]

# What an answer rests on, one curve each: the printed text alone, narrowed by the log's words, frames or code, or
# the prior (with or without a printed group). Read from the evidence kinds the engine writes.
KINDS = ("named", "narrowed", "prior")
VALUES = frozenset({"tensor", "guard", "module", "config", "tokenizer"})
NARROWING = frozenset({"traceback", "log", "source", "journal"})
PRINTED = frozenset({"assertion", "error_text"})

_state = {"enabled": True}


@dataclass(frozen=True)
class Curve:
    """A non-decreasing step map from a score to a probability: ``points`` are (lowest score of a block, the
    block's share right); a score takes the share of the last block starting at or below it."""

    points: tuple[tuple[float, float], ...]

    def __call__(self, score: float) -> float:
        share = self.points[0][1]
        for start, block_share in self.points:
            if score >= start:
                share = block_share
        return share


SHRINK = 5.0  # pseudo-logs at the half's overall share right added to each block: a block of a few logs all right
# is not 100 %, and the dev half's rules were written on its own logs, so its shares run high


def answer_kind(cause: Cause) -> str | None:
    """Which curve a top cause's score goes through; None for an answer backed by a value read (kept as it is)."""
    kinds = {e.kind for e in cause.evidence}
    if kinds & VALUES:
        return None
    if "prior" in kinds and kinds <= PRINTED | {"prior"}:
        return "prior"
    return "narrowed" if kinds & NARROWING else "named"


def prior_support(cause: Cause, ranking: Prior) -> float:
    """What the prior alone says of ``cause``: its share of the causes of its group when a printed text names the
    group (the assertion or the host-side message), else its share of all the symptom's causes."""
    if any(e.direct for e in cause.evidence):
        return ranking.within_group(cause.family)
    return ranking.share(cause.family)


def fit(pairs: list[tuple[float, bool]], overall: float | None = None) -> Curve:
    """Pool adjacent violators: blocks of scores in order whose share right never falls as the score rises; each
    block becomes one step (its lowest score, its share right shrunk toward ``overall`` by ``SHRINK``; by default
    the pairs' own share right)."""
    if overall is None:
        overall = sum(right for _, right in pairs) / len(pairs)
    blocks: list[list[float]] = []  # [lowest score, right, count]
    for score, right in sorted(pairs):
        if blocks and blocks[-1][0] == score:  # one score, one probability: tied scores are one block
            blocks[-1][1:] = [blocks[-1][1] + right, blocks[-1][2] + 1]
            continue
        _pool(blocks, overall)
        blocks.append([score, float(right), 1.0])
    _pool(blocks, overall)
    return Curve(tuple((round(block[0], 4), round(_share(block, overall), 4)) for block in blocks))


def _pool(blocks: list[list[float]], overall: float) -> None:
    """Merge the last block into the one before while its share is not above that one's."""
    while len(blocks) > 1 and _share(blocks[-2], overall) >= _share(blocks[-1], overall):
        last = blocks.pop()
        blocks[-1] = [blocks[-1][0], blocks[-1][1] + last[1], blocks[-1][2] + last[2]]


def _share(block: list[float], overall: float) -> float:
    _, right, count = block
    return (right + SHRINK * overall) / (count + SHRINK)


@cache
def _curves() -> dict[str, Curve]:
    data = json.loads(resources.files("nb_cudaguard").joinpath("data/calibration.json").read_text())
    return {kind: Curve(tuple((float(x), float(y)) for x, y in points)) for kind, points in data["curves"].items()}


@contextmanager
def disabled() -> Iterator[None]:
    """The engine's raw scores, for fitting the curves on them (``tools/fit_calibration.py``)."""
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = True


def exclusive(causes: list[Cause], ranking: Prior | None = None) -> list[Cause]:
    """``causes`` ranked by score, their confidences made probabilities: the first through its kind's curve, and
    any answer resting on the prior alone no higher than the prior supports; the others scaled so that together they
    fit in what the first leaves, each below the first."""
    if not causes or not _state["enabled"]:
        return causes
    first = causes[0]
    kind = answer_kind(first)
    if kind is not None:
        first.confidence = _capped(first, _curves()[kind](first.confidence), ranking)
    left = 1.0 - first.confidence
    rest = sum(c.confidence for c in causes[1:])
    scale = min(1.0, left / rest) if rest > 0 else 1.0
    above = first.confidence
    for cause in causes[1:]:
        # never above the cause ranked before it: a cap must not read as a reordering the ranking did not make
        cause.confidence = above = min(_capped(cause, cause.confidence * scale, ranking), above)
    return causes


def _capped(cause: Cause, confidence: float, ranking: Prior | None) -> float:
    if ranking is None or answer_kind(cause) != "prior":
        return confidence
    return min(confidence, prior_support(cause, ranking))
