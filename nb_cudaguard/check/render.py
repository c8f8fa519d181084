"""How IPython shows a check's error: one compact block instead of ~70 lines through torch's and our frames.

IPython (7.x to 9.x) and ipykernel show an exception through its ``_render_traceback_`` when it has one, and send
the strings it returns as the error's traceback; ``ename`` and ``evalue`` stay the type and the whole ``str()``.
The block is:

1. the error's headline (the op, the user's variable, the bad values, the user's line) where IPython puts the
   exception's line, coloured as IPython colours it;
2. IPython's own traceback, in the shell's ``%xmode`` and colours, of the user's frames only: the running cell and
   the user's own files, from the cell inward (no site-packages, no torch, no nb_cudaguard, not the call line of
   the cell magic). The exact checks' error has them in its traceback; the fast checks raise when the cell ends,
   so theirs are the frames recorded where the op ran, laid out as IPython's plain mode lays out a frame list;
3. the details: the valid range, the fix, what became of the op and the context.

IPython formats an exception whose message is a marker, and the marker's line becomes the headline; the lines
between IPython's header and that line are the frames. Whatever goes wrong falls back to IPython's own traceback:
the renderer must never be what hides an error.
"""

from __future__ import annotations

import re
import types
from typing import Any, cast

from nb_cudaguard.check.context import Known, code_facts
from nb_cudaguard.check.fast.error import FastCheckError
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.incident.usercode import from_running_cell

_MARKER = "nb-cudaguard-headline-3f9c1e"
_HEADER = "(most recent call last)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def render(error: CudaCheckError) -> list[str]:
    """The strings IPython shows for ``error``: the compact block, as one string (so that IPython's modes, which
    join a traceback's strings differently, all show it as it is)."""
    formatter = _formatter()
    if formatter is not None:
        try:
            return [_compact(error, formatter)]
        except Exception:  # the block is a courtesy: IPython's own traceback still tells the whole story
            pass
        try:
            return formatter.structured_traceback(type(error), error, error.__traceback__)
        except Exception:
            pass
    return [f"{type(error).__name__}: {error}"]


def _formatter() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return getattr(get_ipython(), "InteractiveTB", None)


def _compact(error: CudaCheckError, formatter: Any) -> str:
    from IPython.core.ultratb import ListTB

    etype = type(error)
    stand_in = etype.__new__(etype, _MARKER)  # formats as the error's type, with the marker as its message
    notes = getattr(error, "__notes__", None)
    if notes:
        vars(stand_in)["__notes__"] = list(notes)
    parts: list[str] = []
    join = ""  # IPython's plain mode: each frame ends its own lines
    if isinstance(error, FastCheckError):
        if error.frames:
            parts = ListTB.structured_traceback(formatter, etype, stand_in, cast(Any, list(error.frames)), 0)
    else:
        tb = user_traceback(error.__traceback__)
        if tb is not None:
            parts, join = formatter.structured_traceback(etype, stand_in, tb, tb_offset=0), formatter.tb_join_char
    at = next((i for i, part in enumerate(parts) if _MARKER in part), None)
    if at is None:  # no frames, or a layout this module does not know: the exception's line alone
        parts, at = ListTB.get_exception_only(formatter, etype, stand_in), 0
    headline = "\n".join(part.rstrip("\n") for part in parts[at:]).replace(_MARKER, error.headline())
    frames = join.join(_after_header(parts[:at])).rstrip("\n")
    return "\n".join([headline, *([frames, ""] if frames else []), *error.details()])


def _after_header(parts: list[str]) -> list[str]:
    """The frames: what follows IPython's header (a rule and the type, or "Traceback (most recent call last):")."""
    for i, part in enumerate(parts):
        if _HEADER in _ANSI.sub("", part):
            return parts[i + 1 :]
    return parts


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` with only the user's frames, from the running cell inward (``usercode.from_running_cell``)."""
    known: Known = {}
    entries = []
    while tb is not None:
        facts = code_facts(tb.tb_frame.f_code, known)
        if facts.user:
            entries.append((facts, tb))
        tb = tb.tb_next
    kept = len(from_running_cell([facts for facts, _ in entries]))
    chain: types.TracebackType | None = None
    for _, entry in reversed(entries[len(entries) - kept :]):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def install() -> None:
    """Show the checks' errors compactly in IPython from now on (the checks call it when they start)."""
    CudaCheckError.renderer = render
