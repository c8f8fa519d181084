"""From a ranking's scores to probabilities that mean what they say, and that add up to at most 100 %.

The engine's scores combine evidence as independent odds, which ranks well but overstates: on the corpus's dev half
answers scored 90 % and more were right far less often than that. The top cause's score is mapped through an
isotonic curve (``data/calibration.json``) fitted on the dev half only by ``tools/fit_calibration.py``: how often
an answer with that score was right there. The causes of one report are exclusive (one of them failed), so the ones
after the first share what the first leaves, never more; the rest is "something else".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources

from nb_cudaguard.diagnosis.causes import Cause

__all__ = ["Curve", "disabled", "exclusive", "fit"]

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


def fit(pairs: list[tuple[float, bool]]) -> Curve:
    """Pool adjacent violators: blocks of scores in order whose share right never falls as the score rises; each
    block becomes one step (its lowest score, its share right shrunk toward the overall share by ``SHRINK``)."""
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
def _curve() -> Curve:
    data = json.loads(resources.files("nb_cudaguard").joinpath("data/calibration.json").read_text())
    return Curve(tuple((float(x), float(y)) for x, y in data["points"]))


@contextmanager
def disabled() -> Iterator[None]:
    """The engine's raw scores, for fitting the curve on them (``tools/fit_calibration.py``)."""
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = True


def exclusive(causes: list[Cause]) -> list[Cause]:
    """``causes`` ranked by score, their confidences made probabilities: the first through the curve; the
    others scaled so that together they fit in what the first leaves, each below the first."""
    if not causes or not _state["enabled"]:
        return causes
    first = causes[0]
    first.confidence = _curve()(first.confidence)
    left = 1.0 - first.confidence
    rest = sum(c.confidence for c in causes[1:])
    scale = min(1.0, left / rest) if rest > 0 else 1.0
    for cause in causes[1:]:
        cause.confidence = min(cause.confidence * scale, first.confidence)
    return causes
