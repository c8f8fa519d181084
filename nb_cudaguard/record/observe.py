"""What a cell changed, as the runtime saw it: the names it bound anew, and the objects it changed in place.

The replay plan, the carry plan and the snapshot must know what a cell changed. Guessed from the source, any method
call changes its object (``train_x[i:j].to(device)`` "changes" ``train_x``), so a training loop that reads its data
counted as one that rewrote it, and the cell was run again instead of being restored. The runtime can tell cheaply,
from metadata only (no value is read, nothing synchronises with a GPU):

* a tensor: its identity, version counter (autograd bumps it on every in-place write) and data pointer;
* a module: the versions of its parameters and buffers, their count, and its ``training`` flag;
* an optimizer: the steps torch's global step hook counted, and how many parameters hold state;
* an LR scheduler or a ``GradScaler``: its step counters; a container: its identity and length;
* an immutable value (a number, a string, a tuple of them, a module, a function): it cannot change in place.

Only the names a cell's source mentions are fingerprinted, before and after it (a regular expression over the
source, not a parse), so the cost follows the cell, not the namespace. What changes without being named is what an
optimizer steps: the step hook tells which optimizers stepped during the cell (a ``Trainer`` builds its own), and
the namespace's modules holding their parameters are changed too; the namespace is walked for them only after a
cell that stepped one. Objects the runtime cannot see into (a tokenizer, a DataFrame, a user's class) are left to the
source analysis, and the observation says which those were.
"""

from __future__ import annotations

import re
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.record.copies import COPIES

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), frozenset, range)
_CONTAINERS = (list, dict, set, bytearray)
# a function, a class, a module: what a cell does to one by name is a rebinding (a redefinition), seen by identity
_CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, types.ModuleType)
OPAQUE = None  # the fingerprint of what the runtime cannot see into


@dataclass
class Observed:
    """What one cell did to the namespace. ``opaque``: names it mentions whose objects the runtime cannot see into
    (the source analysis decides whether it changed those); ``partial``: containers, whose length is seen but not
    an item replaced in place (the source analysis adds those)."""

    rebound: set[str] = field(default_factory=set)
    changed: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    partial: set[str] = field(default_factory=set)
    stepped: bool = False  # an optimizer stepped during the cell (named or not)

    @property
    def touched(self) -> set[str]:
        """Every name whose object the cell may have changed, bound or deleted."""
        return self.rebound | self.changed | self.deleted | self.opaque | self.partial

    def to_dict(self) -> dict[str, Any]:
        sets = {name: sorted(getattr(self, name)) for name in _SETS}
        return {**sets, "stepped": self.stepped}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observed:
        sets: dict[str, Any] = {name: set(map(str, data.get(name, []))) for name in _SETS}
        return cls(**sets, stepped=bool(data.get("stepped", False)))


_SETS = ("rebound", "changed", "deleted", "opaque", "partial")


def mentioned(source: str) -> set[str]:
    """Every identifier in a cell's source: a superset of the names it can bind or change by name."""
    return set(_IDENTIFIER.findall(source))


def fingerprint(value: Any, steps: dict[int, int]) -> tuple | None:
    """What tells that ``value`` changed in place, or ``OPAQUE``. Metadata only: never reads a device value."""
    if isinstance(value, (*_IMMUTABLE, *_CODE)):
        return ("immutable",)
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(value, torch.Tensor):
            return ("tensor", value._version, _pointer(value), tuple(value.shape), value.dtype)
        if isinstance(value, torch.nn.Module):
            tensors = [*value.parameters(), *value.buffers()]
            return ("module", value.training, len(tensors), sum(t._version for t in tensors))
        if isinstance(value, torch.optim.Optimizer):
            return ("optimizer", steps.get(id(value), 0), len(value.state))
        if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
            return ("scheduler", getattr(value, "last_epoch", None), getattr(value, "_step_count", None))
    if isinstance(value, tuple):
        parts = [fingerprint(item, steps) for item in value[:64]]
        return OPAQUE if len(value) > 64 or any(p is OPAQUE for p in parts) else ("tuple", *parts)
    if isinstance(value, _CONTAINERS):
        return ("container", len(value))
    return OPAQUE


def _pointer(tensor: Any) -> int:
    try:
        return int(tensor.data_ptr())
    except RuntimeError:  # a tensor without storage (a meta or functional tensor)
        return 0


class Observer:
    """Fingerprints around each cell. ``steps`` counts each optimizer's steps (by id), from torch's global step
    hook, registered once torch is imported; the optimizers that stepped during the running cell are held weakly
    until its end, to find the namespace's modules whose parameters they stepped."""

    def __init__(self) -> None:
        self.steps: dict[int, int] = {}
        self._stepped: dict[int, weakref.ref[Any]] = {}
        self._hook: Any = None
        self._before: dict[str, tuple[int, tuple | None]] = {}
        self._names: set[str] = set()

    def _count_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        key = id(optimizer)
        self.steps[key] = self.steps.get(key, 0) + 1
        if key not in self._stepped:
            self._stepped[key] = weakref.ref(optimizer)

    def hook(self) -> None:
        """Count optimizer steps from now on (torch 2.0 and later; before, only named optimizers are seen), and
        see each copy to a device (``record.copies``)."""
        COPIES.install()
        if self._hook is None and "torch" in sys.modules:
            try:
                from torch.optim.optimizer import register_optimizer_step_post_hook
            except ImportError:
                return
            self._hook = register_optimizer_step_post_hook(self._count_step)

    def close(self) -> None:
        COPIES.uninstall()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def before(self, source: str, namespace: dict[str, Any]) -> None:
        self.hook()
        self._stepped.clear()
        self._names = mentioned(source)
        self._before = {
            n: (id(namespace[n]), fingerprint(namespace[n], self.steps)) for n in self._names & namespace.keys()
        }

    def after(self, namespace: dict[str, Any], hidden: Any = ()) -> Observed:
        self.hook()  # a cell that imported torch: its steps count from the next cell on
        seen = Observed()
        for name in self._names:
            if name not in namespace:
                if name in self._before:
                    seen.deleted.add(name)
                continue
            value = namespace[name]
            mark = fingerprint(value, self.steps)
            before = self._before.get(name)
            if before is None or before[0] != id(value):
                seen.rebound.add(name)
            elif mark is OPAQUE:
                seen.opaque.add(name)
            elif mark != before[1]:
                seen.changed.add(name)
            elif mark[0] == "container":
                seen.partial.add(name)
        if self._stepped:
            seen.stepped = True
            seen.changed |= self._trained(namespace, hidden) - seen.rebound
        self._before, self._names = {}, set()
        return seen

    def _trained(self, namespace: dict[str, Any], hidden: Any) -> set[str]:
        """The names of the optimizers that stepped during the cell, and of the modules whose parameters they
        hold: a ``Trainer`` steps the user's ``model`` with an optimizer of its own, and no name in the cell says so."""
        torch = sys.modules.get("torch")
        optimizers = [ref() for ref in self._stepped.values()]
        self._stepped.clear()
        if torch is None:
            return set()
        stepped = {id(p) for opt in optimizers if opt is not None for g in opt.param_groups for p in g["params"]}
        stepping = {id(opt) for opt in optimizers if opt is not None}
        found = set()
        for name, value in list(namespace.items()):
            if name.startswith("_") or name in hidden:
                continue
            if isinstance(value, torch.optim.Optimizer):
                if id(value) in stepping:
                    found.add(name)
            elif isinstance(value, torch.nn.Module) and any(id(p) in stepped for p in value.parameters()):
                found.add(name)
        return found
