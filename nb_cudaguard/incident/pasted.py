"""Undo what copying a log into a thread, a notebook viewer or a narrow terminal did to it, before it is read.

Users rarely paste a log as the process printed it. A reply quotes it (``> `` before every line), torchrun tees
every rank's output with ``[rank0]: `` in front, Kaggle's log viewer adds the elapsed seconds and a line number,
and a terminal of fixed width breaks a long assertion line into pieces. Every reader after this one (the
traceback's frames, the exception line, the assertion parser) anchors on how a line starts and what it holds
whole, so each of these would hide the frames or the assertion, and a CUDA error would be read as no error.
"""

from __future__ import annotations

import re

# What tools and threads put before every line of a log: one table, one pattern a kind. A kind is removed only where
# at least half the log's lines carry it (a single quoted line inside a log is the log's own text).
LINE_PREFIXES = {
    # A Markdown or e-mail quote, one level at a time; never a Python prompt's ``>>>``.
    "quote": re.compile(r">(?!>>) ?"),
    # torch.distributed.run (torchrun) tees each rank's output under its rank: ``[rank0]:`` (2.x), ``[default0]:``.
    "rank": re.compile(r"\[(?:rank|default)\d+\]: ?"),
    # Kaggle's log viewer: the seconds since the start and the line's number.
    "kaggle": re.compile(r"\s*\d+(?:\.\d+)?s\s+\d+\s"),
}
_ENOUGH = 0.5
_QUOTE_LEVELS = 4
# A terminal breaks lines at its width: pieces that long are rejoined only where the break is that terminal's (at
# least two lines exactly as long as the longest) and the next piece does not start a line of its own.
_MIN_WIDTH = 60
_MIN_BROKEN = 2
_LINE_START = re.compile(  # \A: matched at a line's start only (a scan would be quadratic on long lines)
    r"\A(?:\s|$|(\.{0,2}|…)/|[A-Za-z]:\\|block: \[|THCudaCheck|File |Traceback |During handling|The above exception"
    r"|[A-Za-z_][\w.]*(Error|Exception|Warning)\b|\[|frame #|Exception raised|terminate called|\d+%\||-+>|Cell In)"
)
# A device assertion is one line (``... Assertion `cond` failed.``); broken anywhere after ``Assertion``, its pieces
# are joined up to ``failed``, however wide the lines.
_OPEN_ASSERTION = re.compile(r"Assertion [`'](?!.*failed)")
_ASSERTION_PIECES = 4
# What no piece of a condition starts with: the exception's line, a traceback, the next device line. An assertion
# line cut short at its end (a clipped column) is followed by one of these, which stays a line of its own.
_NOT_A_PIECE = re.compile(  # \A: matched at a line's start only
    r"\A(?:[A-Za-z_][\w.]*(?:Error|Exception):|Traceback \(|\S+\.(?:cuh?|hip):\d+: |CUDA kernel errors)"
)
# A source path is never broken by whoever printed it: a long line that ends inside one (its last word holds a
# ``/``) and a next line that finishes it (a file name with a source extension, no indent) are one line, even where
# no second line of the terminal's width shows where it breaks (``... at /pytorch/aten/src/THC/generi`` and
# ``c/THCTensorScatterGather.cu:67``).
_SOURCE_FILE = r"\.(?:cuh?|cpp|cc|c|h|hpp|py)"
_OPEN_PATH = re.compile(rf"/(?![\w.+-]*{_SOURCE_FILE}$)[\w.+-]*$")  # the last word a path, its file not yet whole
# The rest of the path: a file name's tail, or from a ``/`` a path that is the whole line (a line that goes on after
# its path, as an assertion's does, is a line of its own).
_PATH_END = re.compile(rf"\A(?:[\w.+-]+(?:/[\w.+-]+)*{_SOURCE_FILE}\b|(?:/[\w.+-]+)+{_SOURCE_FILE}(?::\d+)?\s*$)")


def unpasted(text: str) -> str:
    """The log as it was printed: line prefixes removed, a terminal's broken lines joined."""
    lines = text.split("\n")
    for kind, prefix in LINE_PREFIXES.items():
        for _ in range(_QUOTE_LEVELS if kind == "quote" else 1):
            stripped = _without(prefix, lines)
            if stripped is None:
                break
            lines = stripped
    return "\n".join(_assertions_whole(_paths_whole(_rejoined(lines))))


def _without(prefix: re.Pattern[str], lines: list[str]) -> list[str] | None:
    """The lines without the prefix, if at least half the non-empty ones carry it; else None."""
    filled = [line for line in lines if line.strip()]
    carrying = sum(1 for line in filled if prefix.match(line))
    if not filled or carrying < _ENOUGH * len(filled):
        return None
    return [line[match.end() :] if (match := prefix.match(line)) else line for line in lines]


def _rejoined(lines: list[str]) -> list[str]:
    """Each piece a terminal broke off at its width, back on the line it came from."""
    widest = max((len(line) for line in lines), default=0)
    if widest < _MIN_WIDTH or sum(1 for line in lines if len(line) == widest) < _MIN_BROKEN:
        return lines
    joined: list[str] = []
    broken = False
    for line in lines:
        if broken and not _LINE_START.match(line) and not joined[-1].endswith("failed."):
            joined[-1] += line
        else:
            joined.append(line)
        broken = len(line) == widest
    return joined


def _paths_whole(lines: list[str]) -> list[str]:
    """Each source path a terminal broke, back on its line (see ``_OPEN_PATH``)."""
    joined: list[str] = []
    for line in lines:
        if _PATH_END.match(line) and joined and len(joined[-1]) >= _MIN_WIDTH and _OPEN_PATH.search(joined[-1]):
            joined[-1] += line
        else:
            joined.append(line)
    return joined


def _assertions_whole(lines: list[str]) -> list[str]:
    """Each device assertion on one line, up to its ``failed`` (blank lines between its pieces dropped)."""
    joined: list[str] = []
    pieces = 0
    for line in lines:
        if pieces and not line.strip():
            continue
        if pieces and not _NOT_A_PIECE.match(line.lstrip()):
            joined[-1] += line
            pieces = 0 if "failed" in line else pieces - 1
            continue
        joined.append(line)
        pieces = _ASSERTION_PIECES - 1 if _OPEN_ASSERTION.search(line) else 0
    return joined
