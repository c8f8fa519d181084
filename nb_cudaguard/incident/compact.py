"""A CUDA failure's traceback as the user needs it first: their own frames and the error's line, so that the cell's
output fits one screen with the panel's headline in view. The full traceback is one click away (``Full
traceback``, a folded HTML element right under it; ``%tb`` prints it again), never gone.

What is folded: all but the failing line and its neighbours in each of the user's frames, the frames of libraries
(torch, the standard library, nb_cudaguard; ``incident.usercode``'s one rule) and the four lines of advice PyTorch
appends to every CUDA error (``Search for `cudaErrorAssert'...``, ``CUDA kernel errors might be asynchronously
reported...``, ``For debugging consider passing CUDA_LAUNCH_BLOCKING=1``, ``Compile with `TORCH_USE_CUDA_DSA`...``),
which the panel answers. Every other error keeps IPython's own traceback, untouched.

How: IPython's custom exception handler (``InteractiveShell.set_custom_exc``) for ``RuntimeError``, the class
every CUDA error of torch derives from (``torch.AcceleratorError``, ``torch.OutOfMemoryError``). The handler hands
each error back to IPython's own ``showtraceback``, so that everything it does stays as it was (``sys.last_*``,
``%pdb``, ipykernel's error message and reply); for a CUDA error it first gives the error its compact rendering
through ``_render_traceback_``, the hook IPython asks before it formats a traceback itself, and takes it away again.
A handler someone else installed is left alone: then nothing is folded.
"""

from __future__ import annotations

import contextlib
import html
import re
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.incident import error_text
from nb_cudaguard.incident.usercode import is_user_file

# PyTorch's advice under every CUDA error (c10/cuda/CUDAException.cpp, c10/util/Exception.cpp)
_ADVICE = re.compile(
    r"^(Search for `cuda\w+' in https?://docs\.nvidia\.com|CUDA kernel errors might be asynchronously reported"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING=1|Compile with `TORCH_USE_CUDA_DSA`)"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
FULL_CLASS = "nbcg-full-traceback"
_CONTEXT = 3  # lines of source around each of the user's frames: the failing one and its neighbours


@dataclass(frozen=True)
class Folded:
    """One CUDA error's two tracebacks, as IPython's structured lists: the compact one shown, the full one folded.
    ``frames``: the compact one leaves library frames out; ``advice``: and PyTorch's advice lines."""

    compact: list[str]
    full: list[str]
    frames: bool
    advice: bool

    def what(self) -> str:
        return " and ".join(
            part for part, folded in (("library frames", self.frames), ("PyTorch's CUDA advice", self.advice)) if folded
        )

    def bundle(self) -> dict[str, str]:
        """The folded full traceback: a ``<details>`` in HTML, the way to print it again as text."""
        text = _ANSI.sub("", "\n".join(self.full))
        summary = "Full traceback (all frames, PyTorch's CUDA advice)"
        return {
            "text/plain": f"nb_cudaguard folded {self.what()} out of this traceback: %tb prints it whole.",
            "text/html": f'<details class="{FULL_CLASS}"><summary style="cursor:pointer;opacity:.75">{summary}'
            f'</summary><pre style="overflow-x:auto">{html.escape(text)}</pre></details>',
        }


def is_cuda_error(error: BaseException) -> bool:
    """The same words decide it as for the report (``incident.classify``): the error's text or its chain's."""
    return catalog.is_cuda_text(f"{error}\n{error_text(error)}")


def fold(shell, etype: type[BaseException], error: BaseException, tb, tb_offset: int | None = None) -> Folded | None:
    """The compact and the full traceback of a CUDA ``error``; None when there is nothing to fold, when the error
    is no CUDA error or its class formats itself (``_render_traceback_`` on the class)."""
    if "_render_traceback_" in dir(etype) or not is_cuda_error(error):
        return None
    formatter = shell.InteractiveTB
    own = vars(error).get("_render_traceback_") if hasattr(error, "__dict__") else None
    # the simulation's or the copy wrapper's own rendering: the traceback a GPU would show (testing.frames)
    full = list(own()) if own is not None else formatter.structured_traceback(etype, error, tb, tb_offset=tb_offset)
    entries = list(_entries(tb))
    users = [entry for entry in entries if is_user_file(entry.tb_frame.f_code.co_filename)]
    if not users:
        return None
    # the failing line with one line either side (IPython's default shows five), positional: IPython 7 and 9 name
    # that parameter differently
    compact = formatter.structured_traceback(etype, error, _chain(users), 0, _CONTEXT)
    compact[-1], advice = _without_advice(compact[-1])
    # library frames the full one shows: any but IPython's own first one (run_code) and the hidden ones
    frames = any(not is_user_file(e.tb_frame.f_code.co_filename) for e in _shown(entries[1:]))
    if not frames and not advice:
        return None
    return Folded(compact, full, frames, advice > 0)


def _entries(tb) -> Iterator[types.TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _chain(entries: list[types.TracebackType]) -> types.TracebackType | None:
    chain: types.TracebackType | None = None
    for entry in reversed(entries):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return chain


def _shown(entries: list[types.TracebackType]) -> list[types.TracebackType]:
    """``entries`` less the frames IPython hides (``__tracebackhide__``): the simulation's and the extension's."""
    return [entry for entry in entries if "__tracebackhide__" not in entry.tb_frame.f_locals]


def _without_advice(text: str) -> tuple[str, int]:
    """The error's entry of a structured traceback without PyTorch's advice lines (their colour codes kept, so that
    what follows is coloured as before); how many lines went."""
    kept: list[str] = []
    dropped = 0
    for line in text.split("\n"):
        if _ADVICE.match(_ANSI.sub("", line)):
            dropped += 1
            kept[-1:] = [kept[-1] + "".join(_ANSI.findall(line))] if kept else []
        else:
            kept.append(line)
    return "\n".join(kept), dropped


@contextlib.contextmanager
def _rendered_as(error: BaseException, stb: list[str]) -> Iterator[None]:
    """``error`` renders as ``stb`` for as long as IPython shows it, then as before."""
    attributes = vars(error)
    had = "_render_traceback_" in attributes
    before = attributes.get("_render_traceback_")
    attributes["_render_traceback_"] = lambda: list(stb)
    try:
        yield
    finally:
        if had:
            attributes["_render_traceback_"] = before
        else:
            attributes.pop("_render_traceback_", None)


def make_handler(show_full: Callable[[Folded], None]) -> Callable[..., None]:
    """The custom exception handler: every error goes to IPython's ``showtraceback``; a CUDA error's compact
    traceback first replaces its rendering for that call, and its full one goes to ``show_full`` (in a kernel; a
    terminal's ends with how to print it)."""

    def handler(shell, etype, error, tb, tb_offset=None) -> None:
        folded = None
        try:
            folded = fold(shell, etype, error, tb, tb_offset)
        except Exception:  # the compact form is a courtesy: IPython's own traceback if it cannot be made
            folded = None
        if folded is None:
            shell.showtraceback((etype, error, tb), tb_offset=tb_offset)
            return
        if getattr(shell, "kernel", None) is None:  # a terminal: no click, the way to it ends the traceback
            with _rendered_as(error, [*folded.compact, folded.bundle()["text/plain"]]):
                shell.showtraceback((etype, error, tb), tb_offset=tb_offset)
            return
        with _rendered_as(error, folded.compact):
            shell.showtraceback((etype, error, tb), tb_offset=tb_offset)
        show_full(folded)

    return handler


def show_folded(folded: Folded) -> None:
    """Right under the compact traceback, before the panel: the full one, folded."""
    from IPython.display import display

    display(folded.bundle(), raw=True)


# the custom exception handler this module installed in each shell (by id): only that one is removed again
_INSTALLED: dict[int, Callable[..., object]] = {}


def install(shell, show_full: Callable[[Folded], None] = show_folded) -> bool:
    """Fold CUDA errors' tracebacks in ``shell``; False when a handler is installed already (someone else's: then
    nothing is folded; or this module's)."""
    if tuple(getattr(shell, "custom_exceptions", ())) != ():
        return False
    shell.set_custom_exc((RuntimeError,), make_handler(show_full))
    _INSTALLED[id(shell)] = shell.CustomTB
    return True


def uninstall(shell) -> None:
    """Remove the handler ``install`` put in ``shell``, unless another has replaced it since."""
    custom = _INSTALLED.pop(id(shell), None)
    if custom is not None and shell.CustomTB is custom:
        shell.set_custom_exc((), None)
