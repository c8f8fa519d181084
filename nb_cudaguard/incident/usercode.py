"""The one rule for "is this the user's code?", and for "which of its lines is the user's line?": a live frame, a
checked op's caller and a pasted log's frame.

The report points at the user's own line and the checks name the user's variable, so all three must agree on where
the user's code ends and a library's begins. A live path is a library's when it lies under the standard library,
site-packages, torch or this package; a path from a pasted log (another machine) when it names an installed-package
folder. Generated code in angle brackets is a library's, except the names IPython and ``exec`` give user source.

The user's line is a line of the cell they ran: the call into a model's ``forward()`` that an earlier cell defined,
not the line inside it (that one is where it failed, shown after it). The cell's own code is its top-level frame
and the functions it defined; a cell magic that runs the cell's body (``%%cudacheck``) adds a top-level frame of
its own under the magic's call line, and the body is what the user wrote.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Protocol, TypeVar

_USER_PSEUDO_FILES = ("<ipython-input-", "<string>", "<stdin>")
_INSTALLED_MARKERS = ("site-packages", "dist-packages", "/lib/python")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Folders whose code is not the user's: the standard library, site-packages, torch, this package."""
    roots = {_PACKAGE_ROOT, os.path.realpath(_PACKAGE_ROOT)}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.update((os.path.abspath(paths[key]), os.path.realpath(paths[key])))
    try:
        roots.update(os.path.abspath(p) for p in site.getsitepackages())
    except AttributeError:  # virtualenvs with an old site.py
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(os.path.abspath(user_site))
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        roots.add(os.path.dirname(os.path.abspath(torch_file)))
    return tuple(sorted(roots))


def is_user_file(filename: str) -> bool:
    """A file of this process: a notebook cell, a script or the user's own module, not a library's."""
    if filename.startswith("<"):
        return filename.startswith(_USER_PSEUDO_FILES)
    if any(marker in filename for marker in _INSTALLED_MARKERS):
        return False
    path = os.path.abspath(filename)
    return not any(path == root or path.startswith(root + os.sep) for root in _library_roots())


def is_user_file_in_log(filename: str) -> bool:
    """A file named in a log from another machine: only the installed-package folders are known to be libraries."""
    if filename.startswith("<"):
        return filename.startswith(_USER_PSEUDO_FILES)
    return not any(marker in filename for marker in _INSTALLED_MARKERS)


# IPython 7 keeps no map from a cell's filename to its number, and under ipykernel 6 it names each cell by a hash of
# its source (``/tmp/ipykernel_<pid>/<hash>.py``), which no number can be read from: the names are noted here as the
# cells start (``note_cell``), the last ``_NOTED_LIMIT`` of them.
_NOTED: dict[str, int] = {}
_NOTED_LIMIT = 10_000


def cell_filenames(shell) -> Mapping[str, int]:
    """Filename -> execution count of the cells ``shell`` compiled: IPython 8+'s own map, else the noted one."""
    own = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return own if own is not None else _NOTED


def note_cell(shell, raw_code: str, number: int | None) -> None:
    """Note the name ``shell`` compiles ``raw_code`` under, where IPython keeps no map (7). Names that carry the
    number themselves (``<ipython-input-N-hash>``) need none; a name the compiler cannot tell is left out."""
    compiler = getattr(shell, "compile", None)
    if number is None or compiler is None or getattr(compiler, "_filename_map", None) is not None:
        return
    try:
        name = compiler.get_code_name(raw_code, raw_code, number)
    except Exception:  # a compiler of another shape: the cells are then named as IPython's tracebacks name them
        return
    note_filename(name, number)


def note_filename(name: str, number: int) -> None:
    if name.startswith("<ipython-input-"):
        return
    if len(_NOTED) >= _NOTED_LIMIT:
        del _NOTED[next(iter(_NOTED))]
    _NOTED[name] = number


def cell_number(filename: str, cell_filenames: Mapping[str, int]) -> int | None:
    """The execution count of the notebook cell compiled under ``filename``, else None, from ``cell_filenames``
    (see ``cell_filenames()``); IPython 7's own names, ``<ipython-input-N-hash>``, carry it."""
    number = cell_filenames.get(filename)
    if number is None and filename.startswith("<ipython-input-"):
        digits = filename.split("-")[2:3]
        number = int(digits[0]) if digits and digits[0].isdigit() else None
    return number


class CodePlace(Protocol):
    """What the rule needs of a frame: its file, its function (``<module>`` for top-level code) and its cell."""

    @property
    def filename(self) -> str: ...

    @property
    def function(self) -> str: ...

    @property
    def cell(self) -> int | None: ...


P = TypeVar("P", bound=CodePlace)


def is_top_level(function: str) -> bool:
    """A file's or a cell's own top-level code: ``<module>``, or ``<cell line: N>`` as IPython 7 names a cell's
    code on Python 3.10+."""
    return function == "<module>" or function.startswith("<cell line: ")


def from_running_cell(frames: Sequence[P]) -> list[P]:
    """The user's frames (outermost first) from the running cell's own top-level code inward. What calls the cell
    goes (a script or a test driving the shell), and so does a cell magic's call line when the magic runs the
    body itself. Without a cell (a script, a log from another machine) all of them stay."""
    return list(frames[_running_start(frames) :])


def users_line(frames: Sequence[P]) -> tuple[int, int] | None:
    """The indices in ``frames`` (the user's, outermost first) of the user's line and of where it failed: the
    innermost frame of the running cell's own code (its top level and the functions it defined), and the innermost
    user frame. Without a cell both are the innermost. Runs on every call of a fast-checked op: plain loops."""
    if not frames:
        return None
    start, inner = _running_start(frames), len(frames) - 1
    top = frames[start]
    if top.cell is not None:
        for index in range(inner, start - 1, -1):
            if frames[index].filename == top.filename:
                return index, inner
    return inner, inner


def _running_start(frames: Sequence[P]) -> int:
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        if frame.cell is not None and is_top_level(frame.function):
            return index
    return 0
