"""The simulation's frames kept out of the tracebacks IPython shows: a real GPU's error ends in torch's frame.

On a GPU, an op's error comes out of C++ and its traceback ends in the last Python frame that called torch
(``torch/nn/functional.py``'s ``embedding``, the user's own line). The simulation answers from Python frames
(``testing/``, and the torch-function-mode machinery that calls them), so every error that passes through it would
end in a screen of those. Each of them sets ``__tracebackhide__``, which IPython honours for every frame but the
last; the last is always the simulation's own (the raise, or the call into torch that raised), so the error passing
through also gets a ``_render_traceback_`` (IPython's and ipykernel's hook for an exception's own display): IPython's
own traceback, in the shell's mode and colours, of the frames up to where the simulation began.
"""

from __future__ import annotations

import functools
import os
import traceback
import types
import weakref
from collections.abc import Callable

_SIMULATION = os.path.dirname(os.path.abspath(__file__)) + os.sep
# torch's own frames that call a torch-function mode: on a GPU there is no mode, so no such frame
_MODE_MACHINERY = (os.path.join("torch", "overrides.py"), os.path.join("torch", "utils", "_python_dispatch.py"))


def hide(error: BaseException) -> BaseException:
    """Show ``error`` without the simulation's frames (an error with a display of its own keeps it).

    The hook reaches the error by weak reference where the type allows one (CUDA's errors do), so that an error and
    its frames are freed as soon as nothing else holds them; a built-in error holds itself, and the collector
    frees the pair."""
    if not hasattr(error, "_render_traceback_"):
        try:
            ref: Callable[[], BaseException | None] = weakref.ref(error)
        except TypeError:
            ref = functools.partial(_same, error)
        vars(error)["_render_traceback_"] = functools.partial(_render_ref, ref)
    return error


def _same(error: BaseException) -> BaseException:
    return error


def _render_ref(ref: Callable[[], BaseException | None]) -> list[str]:
    error = ref()
    return render(error) if error is not None else []


def real_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` up to the first frame of the simulation, less torch's mode machinery that called it."""
    entries = []
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(_SIMULATION):
        entries.append(tb)
        tb = tb.tb_next
    while entries and (
        entries[-1].tb_frame.f_code.co_filename.endswith(_MODE_MACHINERY)
        or "__tracebackhide__" in entries[-1].tb_frame.f_locals  # a wrapper of the extension's (record.copies)
    ):
        entries.pop()
    chain: types.TracebackType | None = None
    for entry in reversed(entries):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def render(error: BaseException) -> list[str]:
    """IPython's traceback of ``error`` as a GPU would have raised it."""
    tb = real_frames(error.__traceback__)
    try:
        from IPython import get_ipython

        formatter = getattr(get_ipython(), "InteractiveTB", None)
    except ImportError:
        formatter = None
    if formatter is not None:
        lines: list[str] = formatter.structured_traceback(type(error), error, tb)
        return lines
    return traceback.format_exception(type(error), error, tb)
