"""What a call set inside an object that the replay rebuilds: the attributes ``trainer.train()`` set on ``trainer``.

A ``Trainer`` builds its optimizer, its scheduler and its state inside ``train()``. The replay rebuilds the trainer
from the cells that built it and skips the training cell (the snapshot holds what it trained); without this, the
rebuilt trainer would have no optimizer, no scheduler and a step count of zero. What the cell set is observed, not
guessed: after every cell the snapshotter notes the identity of each attribute of the namespace's plain objects
(``Attributes``); an attribute that holds another object after a cell that only called the object (``holders``)
was set by that call.

When a snapshot is taken, those attributes are pickled. Whatever they reach that the rebuilt object has again, the
objects under its other attributes (``trainer.model`` and its parameters, ``trainer.accelerator.state``), is
written as its path there, so the optimizer comes back bound to the rebuilt model's parameters, not to copies of
them. The tensors the attributes own (the optimizer's moments) go through the snapshot's copier, asynchronous from
a GPU, and are stored beside the pickle. A weak reference to an object that is not kept comes back dead, as if its
object had ended with the old process; a method a library patched on the instance (a ``functools.wraps`` wrapper of
the class's own, as torch's schedulers put on their optimizer) is left to the class. An attribute that cannot be
pickled (a closure, a generator) keeps the whole object from being kept, and the plan says it starts over.

Reading the pickle runs the classes' own code (their ``__setstate__``): it is read only from the snapshot's file,
which is private and bound by its SHA-256 to the signed handoff, as the carried values are.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nb_cudaguard.record.cellnames import CellNames
from nb_cudaguard.snapshot.find import plain_object

# How far the walk for the objects the rebuilt holder has again goes, and how much it looks at.
_DEPTH = 4
_NODE_LIMIT = 5000
_LEAVES = (int, float, complex, str, bytes, bool, type(None), type, types.ModuleType, types.FunctionType)

Step = tuple[str, Any]  # ("attr", name) | ("item", key) | ("param", dotted name) | ("buffer", dotted name)


def holders(names: CellNames, paths: Iterable[str], tops: dict[str, str]) -> set[str]:
    """The names a cell changed only by calling them (``trainer.train()``), inside which the snapshot saw what the
    call did to the GPU state: among ``paths`` (what it trained or built) one below the name, not the name itself
    (a ``Trainer`` builds its optimizer and scheduler inside ``train()``)."""
    called = names.call_mutated - names.defined - names.rebound
    inside = {tops[path] for path in paths if "." in path or "[" in path}
    return called & inside


@dataclass
class HeldAttributes:
    """The attributes calls set on one name's object, ready for the snapshot's file (plain data only)."""

    top: str
    names: list[str]
    pickle: bytes
    tensors: list[Any]  # host copies, by their index in the pickle
    devices: list[str]
    parameters: list[bool]

    @property
    def nbytes(self) -> int:
        return len(self.pickle) + sum(int(t.numel() * t.element_size()) for t in self.tensors)

    def content(self) -> dict[str, Any]:
        """Its fields but the name, plain data that ``torch.load(weights_only=True)`` reads back."""
        return {field: value for field, value in vars(self).items() if field != "top"}


class Attributes:
    """The identities of the namespace's plain objects' attributes after the last cell, and per name the
    attributes that calls set inside it since the last snapshot, with what the object reached before them."""

    def __init__(self) -> None:
        self._ids: dict[str, tuple[int, dict[str, int]]] = {}
        self._reach: dict[str, dict[int, type]] = {}
        self.set_by_calls: dict[str, set[str]] = {}
        self._before: dict[str, dict[int, type]] = {}  # name -> what it reached before the first such call

    def after_cell(self, called: set[str], namespace: dict[str, Any]) -> None:
        for top in called:
            obj, before = namespace.get(top), self._ids.get(top)
            if obj is None or before is None or before[0] != id(obj):
                continue  # built by this very cell: the replay runs it
            changed = {name for name, value in vars(obj).items() if before[1].get(name) != id(value)}
            if changed:
                if top not in self.set_by_calls:  # the first such call since the last snapshot
                    self._before[top] = self._reach.get(top, {})
                self.set_by_calls.setdefault(top, set()).update(changed)
        plain = {
            name: value for name, value in list(namespace.items()) if not name.startswith("_") and plain_object(value)
        }
        self._ids = {name: (id(value), {k: id(v) for k, v in vars(value).items()}) for name, value in plain.items()}
        self._reach = {name: {i: kind for i, (_, kind) in _walk(value, set()).items()} for name, value in plain.items()}

    def capture(
        self, namespace: dict[str, Any], to_host: Callable[[Any], Any]
    ) -> tuple[dict[str, HeldAttributes], dict[str, str]]:
        """The attributes to keep, per name, and why a name's could not be kept."""
        held: dict[str, HeldAttributes] = {}
        refused: dict[str, str] = {}
        for top, names in sorted(self.set_by_calls.items()):
            obj = namespace.get(top)
            if obj is None:
                continue
            present = sorted(name for name in names if name in vars(obj))
            before = self._before.get(top, {})
            # what the rebuilt object has again: reached through the attributes no call set, and there before the
            # call (an optimizer the call also handed to a callback is not at that path in the rebuilt object)
            known = {i: path for i, (path, _) in _walk(obj, set(present), before).items()}
            try:
                held[top] = _pickled(top, obj, present, known, to_host)
            except Exception as exc:  # a closure, a generator, a lock: that object's own state starts over
                refused[top] = f"{type(exc).__name__}: {exc}"
        return held, refused

    def taken(self) -> None:
        self.set_by_calls.clear()
        self._before.clear()


def _pickled(
    top: str, obj: Any, names: list[str], known: dict[int, tuple[Step, ...]], to_host: Callable[[Any], Any]
) -> HeldAttributes:
    stream = io.BytesIO()
    pickler = _Pickler(stream, known, to_host)
    pickler.dump({name: vars(obj)[name] for name in names})
    return HeldAttributes(top, names, stream.getvalue(), pickler.tensors, pickler.devices, pickler.parameters)


def _walk(
    obj: Any, skipped: set[str], within: dict[int, type] | None = None
) -> dict[int, tuple[tuple[Step, ...], type]]:
    """What ``obj`` reaches through its attributes but ``skipped``, each object once with its shortest path from
    ``obj`` and its type, a module as a whole (its insides are the module's). With ``within``, only through the
    objects it holds (by identity and type: what ``obj`` reached before a call), and with a module's parameters
    and buffers by name: the replay rebuilds them with the module. Without it (after every cell), the walk stays
    cheap: no module is looked into."""
    torch = sys.modules["torch"]
    found: dict[int, tuple[tuple[Step, ...], type]] = {id(obj): ((), type(obj))}
    queue: deque[tuple[Any, tuple[Step, ...]]] = deque(
        (value, (("attr", name),)) for name, value in vars(obj).items() if name not in skipped
    )
    while queue and len(found) < _NODE_LIMIT:
        value, path = queue.popleft()
        if id(value) in found or isinstance(value, _LEAVES):
            continue
        if within is not None and within.get(id(value)) is not type(value):
            continue
        found[id(value)] = (path, type(value))
        if isinstance(value, torch.nn.Module):
            if within is not None:  # a module there before has its parameters again, by name, once rebuilt
                for step, tensors in (("param", value.named_parameters()), ("buffer", value.named_buffers())):
                    for name, tensor in tensors:
                        found.setdefault(id(tensor), ((*path, (step, name)), type(tensor)))
            continue
        if len(path) >= _DEPTH or isinstance(value, torch.Tensor):
            continue
        if isinstance(value, (list, tuple)):
            queue += [(item, (*path, ("item", i))) for i, item in enumerate(value[:256])]
        elif isinstance(value, dict):
            queue += [(item, (*path, ("item", k))) for k, item in list(value.items())[:256] if isinstance(k, str)]
        elif hasattr(value, "__dict__"):
            queue += [(item, (*path, ("attr", name))) for name, item in vars(value).items()]
    return found


class _Pickler(pickle.Pickler):
    def __init__(self, stream: io.BytesIO, known: dict[int, tuple[Step, ...]], to_host: Callable[[Any], Any]):
        super().__init__(stream, protocol=5)
        self.known, self.to_host = known, to_host
        self.tensors: list[Any] = []
        self.devices: list[str] = []
        self.parameters: list[bool] = []
        self._index: dict[int, int] = {}
        self._torch = sys.modules["torch"]

    def persistent_id(self, obj: Any) -> Any:
        path = self.known.get(id(obj))
        if path is not None:
            return ("at", path)
        if isinstance(obj, self._torch.Tensor):
            if id(obj) not in self._index:
                self._index[id(obj)] = len(self.tensors)
                self.tensors.append(self.to_host(obj))
                self.devices.append(str(obj.device))
                self.parameters.append(isinstance(obj, self._torch.nn.Parameter))
            return ("tensor", self._index[id(obj)])
        return None

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is weakref.ReferenceType:
            target = obj()
            return (weakref.ref, (target,)) if target is not None and id(target) in self.known else (dead_reference, ())
        patched = [name for name, value in getattr(obj, "__dict__", {}).items() if _patch_of(obj, value, name)]
        if not patched or isinstance(obj, type):
            return NotImplemented
        reduced = obj.__reduce_ex__(5)
        if len(reduced) < 3 or not isinstance(reduced[2], dict):
            return NotImplemented
        state = {name: value for name, value in reduced[2].items() if name not in patched}
        return (*reduced[:2], state, *reduced[3:])


def _patch_of(obj: Any, value: Any, name: str) -> bool:
    """A function on the instance that wraps the class's own of that name (``functools.wraps``)."""
    original = getattr(type(obj), name, None)
    wrapped = getattr(value, "__wrapped__", None)
    return isinstance(value, types.FunctionType) and original is not None and wrapped is original


class _Gone:
    """What a dead reference pointed to."""


def dead_reference() -> weakref.ReferenceType:
    """A weak reference whose object is gone (the pickle's stand-in for one to an object that is not kept)."""
    return weakref.ref(_Gone())


def put_back(obj: Any, content: dict[str, Any]) -> list[str]:
    """Set the kept attributes on the rebuilt ``obj``; the names set."""
    torch = sys.modules["torch"]
    made: dict[int, Any] = {}

    def tensor(index: int) -> Any:
        if index not in made:
            value = content["tensors"][index].to(content["devices"][index])
            made[index] = torch.nn.Parameter(value) if content["parameters"][index] else value
        return made[index]

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, pid: Any) -> Any:
            kind, where = pid
            return _resolve(obj, where) if kind == "at" else tensor(where)

    values = _Unpickler(io.BytesIO(content["pickle"])).load()
    for name, value in values.items():
        setattr(obj, name, value)
    return sorted(values)


def _resolve(obj: Any, path: tuple[Step, ...]) -> Any:
    for kind, key in path:
        if kind == "attr":
            obj = getattr(obj, key)
        elif kind == "item":
            obj = obj[key]
        else:
            obj = obj.get_parameter(key) if kind == "param" else obj.get_buffer(key)
    return obj
