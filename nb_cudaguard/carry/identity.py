"""Which names share objects: carrying them in separate pickles would make two objects of one.

``a = b = []``, a model and the optimizer that holds its parameters, an array and a view of it: a cell that changes
one expects to see the change through the other. Such names are rebuilt together by replay, never carried apart.
The walk follows ``gc.get_referents`` from each name's value (no pickling, no reads of tensor memory), stops at
classes, functions and modules (shared by everything, and not state), and adds the memory a tensor or an array
views, since a view shares memory without sharing an object.
"""

from __future__ import annotations

import gc
import sys
import types

_ATOMS = (str, bytes, int, float, complex, bool, type(None), range, slice)
_STOP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
_NODE_LIMIT = 2_000_000


def reachable(value) -> set:
    """Keys of the mutable objects and the memory ``value`` reaches (tuples and frozensets are walked, not keys)."""
    keys: set = set()
    seen: set[int] = set()
    stack = [value]
    while stack and len(seen) < _NODE_LIMIT:
        obj = stack.pop()
        if isinstance(obj, (_ATOMS, _STOP)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if not isinstance(obj, (tuple, frozenset)):
            keys.add(id(obj))
        memory = _memory_key(obj)
        if memory is not None:
            keys.add(memory)
        stack.extend(gc.get_referents(obj))
    return keys


def _memory_key(obj):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        try:
            pointer = obj.untyped_storage().data_ptr()
        except Exception:  # a tensor without storage (meta, sparse, a subclass)
            return None
        return ("tensor memory", obj.device.type, pointer) if pointer else None
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        base = obj
        while isinstance(base.base, numpy.ndarray):
            base = base.base
        return ("array", id(base))
    return None


def shared(values: dict[str, object]) -> dict[str, set[str]]:
    """For each name, the other names whose values share an object or memory with it."""
    owners: dict = {}
    for name, value in values.items():
        for key in reachable(value):
            owners.setdefault(key, set()).add(name)
    result: dict[str, set[str]] = {name: set() for name in values}
    for names in owners.values():
        if len(names) > 1:
            for name in names:
                result[name] |= names - {name}
    return result
