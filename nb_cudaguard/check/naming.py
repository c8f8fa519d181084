"""The name a user knows a checked op's argument by: the variable in their own cell, not the parameter of the
``forward()`` it was passed through, nor nothing at all because the cell passed ``labels.to(device)``.

``%%cudacheck`` stops an op deep inside the user's call (a loss inside a model's ``forward``, an embedding inside
a submodule). What helps the user is the name in the code they wrote at the top: ``ids``, not the ``tokens`` of
the module's ``forward(self, tokens)``. So the user's frames are searched from the outermost (the cell) inward:

1. by identity: a variable holding the very tensor (or a constant-key entry of a dict it holds: ``batch['y']``);
2. by value, in the expression that frame is running: an argument built inline (``labels.to(device)``,
   ``a.unsqueeze(1)``, ``idx.expand_as(m)``) holds the values of the variable it was built from, so the variable
   in that expression whose values equal the argument's (same values, or the same after broadcasting) is it.
   Two different matches name neither;
3. failing both, :meth:`Names.name_of` in the innermost user frame (which may name a view, ``x (a view)``).

Runs on the failure path only, on a healthy context (the op has not run), so it may read values freely.
"""

from __future__ import annotations

import ast
import linecache
import sys
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

import torch

from nb_cudaguard.check.context import Names, user_path

_MAX_COMPARED = 1 << 24  # elements: a larger candidate is not compared value by value
_MAX_ENTRIES = 50  # entries of one dict searched for the tensor


def user_name(names: Names, obj: Any, read_values: bool = True) -> str | None:
    """The user's name for ``obj``, searched from their outermost frame inward; see the module's docstring.
    ``read_values=False`` (the fast checks, which name a site before any failure) skips the comparison by value,
    which would synchronise with the device."""
    if not isinstance(obj, torch.Tensor):
        return names.name_of(obj)
    for depth, frame in enumerate(user_path(names.frame).frames):  # the running cell's code inward
        scopes = [frame.f_locals, frame.f_globals]
        if depth == 0 and names.namespace is not None:
            scopes.append(names.namespace)
        found = _by_identity(scopes, obj) or (_by_value(frame, obj) if read_values else None)
        if found is not None:
            return found
    return names.name_of(obj)


def loaded_from(inner: FrameType | None, names: Names, outer: FrameType | None) -> str | None:
    """The user's dataset that a loop of the code they called was reading when the op ran, for an argument no
    variable of theirs holds. A library's training or evaluation loop (transformers' ``Trainer.evaluate``) builds
    each batch from a ``DataLoader`` over the dataset the user handed it: the loader a running frame holds, and its
    dataset, are what the batch came from. Frames from ``inner`` outward to ``outer`` (the user's line), innermost
    loader first; the name is found by identity, so nothing is read from the device."""
    data = sys.modules.get("torch.utils.data")
    frame = inner
    while data is not None and frame is not None and frame is not outer:
        for value in list(frame.f_locals.values()):
            if isinstance(value, data.DataLoader):
                found = names.name_of(value.dataset) or names.name_of(value)
                if found is not None:
                    return found
        frame = frame.f_back
    return None


def _by_identity(scopes: list[dict], obj: Any) -> str | None:
    for scope in scopes:
        for name, value in list(scope.items()):
            if name.startswith("_"):
                continue
            if value is obj:
                return name
            if isinstance(value, Mapping) and not isinstance(value, type):
                for count, (key, entry) in enumerate(list(value.items())):
                    if count >= _MAX_ENTRIES:
                        break
                    if entry is obj and isinstance(key, (str, int)):
                        return f"{name}[{key!r}]"
    return None


def _by_value(frame: FrameType, obj: Any) -> str | None:
    """The one variable of the running expression whose values are the argument's."""
    source = running_expression(frame)
    if source is None:
        return None
    matches: dict[int, str] = {}
    for text, value in _candidates(source, frame):
        if value is not obj and id(value) not in matches and same_values(value, obj):
            matches[id(value)] = text
    return next(iter(matches.values())) if len(matches) == 1 else None


def running_expression(frame: FrameType) -> str | None:
    """The source of the expression the frame is running (its current call), else of its current line."""
    code = frame.f_code
    positions = getattr(code, "co_positions", None)  # Python 3.11+
    if positions is not None and frame.f_lasti >= 0:
        try:
            start, end, col, end_col = list(positions())[frame.f_lasti // 2]
        except (IndexError, ValueError):
            start = end = col = end_col = None
        if start is not None and end is not None and col is not None and end_col is not None:
            lines = [linecache.getline(code.co_filename, n, frame.f_globals) for n in range(start, end + 1)]
            if all(lines):
                encoded = [line.encode() for line in lines]  # the columns count UTF-8 bytes
                encoded[-1] = encoded[-1][:end_col]
                encoded[0] = encoded[0][col:]
                return b"".join(encoded).decode(errors="replace")
    line = linecache.getline(code.co_filename, frame.f_lineno, frame.f_globals).strip()
    return line.rstrip(":") or None


def _candidates(source: str, frame: FrameType) -> Iterator[tuple[str, Any]]:
    """(text, tensor) for every name and constant-key subscript in ``source`` that holds a tensor in ``frame``."""
    tree: ast.AST
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        try:
            tree = ast.parse(source.strip())
        except SyntaxError:
            return
    for node in ast.walk(tree):
        found = _resolve(node, frame)
        if found is not None and isinstance(found[1], torch.Tensor):
            yield found


def _resolve(node: ast.AST, frame: FrameType) -> tuple[str, Any] | None:
    """Names and ``name['key']`` chains only: nothing is called, no attribute or property runs."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals):
            if node.id in scope:
                return node.id, scope[node.id]
        return None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _resolve(node.value, frame)
        key = node.slice.value
        if base is None or not isinstance(base[1], Mapping) or not isinstance(key, (str, int)):
            return None
        try:
            return f"{base[0]}[{key!r}]", base[1][key]
        except (KeyError, TypeError):
            return None
    return None


def same_values(candidate: torch.Tensor, target: torch.Tensor) -> bool:
    """``target`` holds exactly ``candidate``'s values: the same elements in order (a move, a reshape, a cast
    between integer dtypes), or ``candidate`` broadcast to ``target``'s shape (``expand_as``)."""
    if type(candidate) not in (torch.Tensor, torch.nn.Parameter) or candidate.device.type == "meta":
        return False
    if candidate.numel() == 0 or candidate.numel() > _MAX_COMPARED:
        return False
    if candidate.is_floating_point() != target.is_floating_point() or candidate.is_complex() or target.is_complex():
        return False
    try:
        moved = candidate.detach().to(device=target.device, dtype=target.dtype)
        if moved.numel() == target.numel():
            return bool(torch.equal(moved.reshape(-1), target.detach().reshape(-1)))
        if torch.broadcast_shapes(moved.shape, target.shape) == target.shape:
            return bool(torch.equal(moved.expand(target.shape), target.detach()))
    except (RuntimeError, ValueError):
        return False
    return False
