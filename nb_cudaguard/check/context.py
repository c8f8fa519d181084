"""Where the user is when a checked op fails: their frame, their line, their names for the tensors involved.

Runs only after a check failed, so it may walk frames and namespaces freely. Identity (``is``), never equality:
a tensor's ``==`` is elementwise, and a name is only worth showing if it is the very object the op received.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from traceback import FrameSummary
from types import CodeType, FrameType
from typing import Any, NamedTuple

from nb_cudaguard.incident.usercode import cell_filenames, cell_number, is_top_level, is_user_file, users_line
from nb_cudaguard.record.journal import cell_label

_MAX_MODULES = 200  # user-namespace modules searched for the owner of a weight


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame running the user's code (a notebook cell, a script, their own module)."""
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


class CodeFacts(NamedTuple):
    """What ``usercode.users_line`` reads of a frame, decided once per code object (which it keeps alive, so that
    its id, the cache's key, is not reused: hashing a code object hashes its bytecode)."""

    user: bool
    filename: str
    function: str
    cell: int | None
    cell_top: bool  # a cell's own top-level code: the walk up from an op stops there
    code: CodeType


Known = dict[int, CodeFacts]


def code_facts(code: CodeType, known: Known) -> CodeFacts:
    facts = known.get(id(code))
    if facts is None or facts.code is not code:
        filename, function = code.co_filename, code.co_name
        cell = cell_of(filename)
        top = cell is not None and is_top_level(function)
        facts = known[id(code)] = CodeFacts(is_user_file(filename), filename, function, cell, top, code)
    return facts


class UserPath(NamedTuple):
    """The user's frames from the running cell's top level inward (outermost first), their facts, and where each
    is (code, line): what tells one path through the user's code from another."""

    frames: list[FrameType]
    facts: list[CodeFacts]
    spots: tuple[tuple[int, int], ...]  # (id of the code, line)

    def where(self) -> tuple[str | None, str | None]:
        """(the user's line, where deeper in their code the op was called): the two texts of a check's error."""
        found = users_line(self.facts)
        if found is None:
            return None, None
        line, inner = found
        return describe_line(self.frames[line]), (describe_call(self.frames[inner]) if inner != line else None)

    def summaries(self) -> list[FrameSummary]:
        """The frames as IPython's traceback formatter takes them, for an error raised after they are gone."""
        found = []
        for frame in self.frames:
            code = frame.f_code
            text = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals).strip()
            name = getattr(code, "co_qualname", code.co_name)
            found.append(FrameSummary(code.co_filename, frame.f_lineno, name, lookup_line=False, line=text))
        return found


def _user_frames(start: FrameType | None, known: Known) -> Iterator[tuple[FrameType, CodeFacts]]:
    """The user's frames from ``start`` outward, with their facts, up to the running cell's own top-level frame
    (what calls that cell is not looked at: the walk ends there). One dict lookup per frame."""
    frame = start
    while frame is not None:
        code = frame.f_code
        found = known.get(id(code))
        if found is None or found[5] is not code:
            found = code_facts(code, known)
        if found[0]:
            yield frame, found
            if found[4]:
                return
        frame = frame.f_back


def user_path(start: FrameType | None, known: Known | None = None) -> UserPath:
    """The user's frames from ``start`` up to the running cell, outermost first. ``known``: a cache of code facts
    kept across calls. Runs for a path :func:`user_spots` has not seen."""
    walked = list(_user_frames(start, {} if known is None else known))
    walked.reverse()
    spots = tuple((id(frame.f_code), frame.f_lineno) for frame, _ in walked)
    return UserPath([frame for frame, _ in walked], [facts for _, facts in walked], spots)


def user_spots(start: FrameType | None, known: Known) -> tuple[int, ...]:
    """What tells one path through the user's code from another, innermost first: the id of the code and the
    bytecode offset of each user frame, flat. The key of a cache on every fast-checked call, so it is one loop that
    builds nothing else and reads offsets, not line numbers (a line number is decoded from the code's table)."""
    spots: list[int] = []
    frame = start
    while frame is not None:
        code = frame.f_code
        found = known.get(id(code))
        if found is None or found[5] is not code:
            found = code_facts(code, known)
        if found[0]:
            spots.append(id(code))
            spots.append(frame.f_lasti)
            if found[4]:
                break
        frame = frame.f_back
    return tuple(spots)


def describe_call(frame: FrameType) -> str:
    """``M.forward, cell [3], line 6: return self.emb(tokens)``: the function, then its line."""
    code = frame.f_code
    return f"{getattr(code, 'co_qualname', code.co_name)}, {describe_line(frame)}"


def describe_line(frame: FrameType | None) -> str | None:
    """``cell [4], line 3: loss = criterion(out, y)``, or the file and line for a script."""
    if frame is None:
        return None
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(filename, lineno, frame.f_globals).strip()
    cell = cell_of(filename)
    where = f"cell {cell_label(cell)}" if cell is not None else os.path.basename(filename)
    return f"{where}, line {lineno}: {text}" if text else f"{where}, line {lineno}"


def cell_of(filename: str) -> int | None:
    """The execution count of the cell this process's IPython shell compiled under ``filename``, if any."""
    try:
        from IPython import get_ipython
    except ImportError:
        return cell_number(filename, {})
    return cell_number(filename, cell_filenames(get_ipython()))


@dataclass
class Names:
    """Name lookups for one failure: the innermost user frame's locals first, then the user namespace."""

    frame: FrameType | None
    namespace: dict | None

    def _scopes(self) -> list[dict]:
        scopes = []
        if self.frame is not None:
            scopes.append(self.frame.f_locals)
            scopes.append(self.frame.f_globals)
        if self.namespace is not None:
            scopes.append(self.namespace)
        return scopes

    def name_of(self, obj: Any) -> str | None:
        """The user's name for ``obj`` or, for a view of one of their tensors, ``name (a view)``."""
        if obj is None:
            return None
        found = self._lookup(obj)
        if found is not None:
            return found
        base = getattr(obj, "_base", None)
        if base is not None:
            found = self._lookup(base)
            if found is not None:
                return f"{found} (a view)"
        return None

    def _lookup(self, obj: Any) -> str | None:
        for scope in self._scopes():
            for name, value in list(scope.items()):
                if value is obj and not name.startswith("_"):
                    return name
        return None

    def modules(self) -> list[tuple[str, Any]]:
        """(name, nn.Module) pairs from the user's scopes, outermost names first, each module once."""
        torch_nn = sys.modules.get("torch.nn")
        if torch_nn is None:
            return []
        seen: set[int] = set()
        found = []
        for scope in reversed(self._scopes()):
            for name, value in list(scope.items()):
                if isinstance(value, torch_nn.Module) and not name.startswith("_") and id(value) not in seen:
                    seen.add(id(value))
                    found.append((name, value))
        return found

    def owner_of_weight(self, weight: Any) -> tuple[str, Any] | None:
        """The dotted path and module whose ``.weight`` is ``weight`` (``model.bert.embeddings.word_embeddings``)."""
        if weight is None:
            return None
        searched = 0
        for root_name, root in self.modules():
            for path, module in root.named_modules():
                searched += 1
                if getattr(module, "weight", None) is weight:
                    return (f"{root_name}.{path}" if path else root_name), module
                if searched > _MAX_MODULES * 50:
                    return None
        return None

    def tokenizers(self) -> list[tuple[str, int]]:
        """(name, len) of tokenizer-like objects in the user namespace, for the vocabulary-resize diagnosis."""
        found = []
        for scope in self._scopes():
            for name, value in list(scope.items()):
                if name.startswith("_") or isinstance(value, type):
                    continue
                if hasattr(value, "convert_tokens_to_ids") and hasattr(value, "__len__"):
                    try:
                        found.append((name, len(value)))
                    except Exception:
                        continue
        return found
