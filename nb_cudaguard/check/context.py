"""Where the user is when a checked op fails: their frame, their line, their names for the tensors involved.

Runs only after a check failed, so it may walk frames and namespaces freely. Identity (``is``), never equality:
a tensor's ``==`` is elementwise, and a name is only worth showing if it is the very object the op received.
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

from nb_cudaguard.incident.usercode import is_user_file

_MAX_MODULES = 200  # user-namespace modules searched for the owner of a weight


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame running the user's code (a notebook cell, a script, their own module)."""
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def describe_line(frame: FrameType | None) -> str | None:
    """``cell In[4], line 3: loss = criterion(out, y)``, or the file and line for a script."""
    if frame is None:
        return None
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(filename, lineno, frame.f_globals).strip()
    where = _cell_label(filename) or f"{os.path.basename(filename)}"
    return f"{where}, line {lineno}: {text}" if text else f"{where}, line {lineno}"


def _cell_label(filename: str) -> str | None:
    if filename.startswith("<ipython-input-"):  # IPython 7 names cells <ipython-input-N-hash>
        number = filename.split("-")[2]
        return f"cell In[{number}]" if number.isdigit() else None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    compiler = getattr(shell, "compile", None)
    cell = getattr(compiler, "_filename_map", {}).get(filename)
    return f"cell In[{cell}]" if cell is not None else None


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
