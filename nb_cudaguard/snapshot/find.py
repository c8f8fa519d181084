"""The GPU-resident state the namespace holds, found without reading a single value on the device.

After every successful cell the snapshotter asks which trained objects live on the GPU and which of them the cell
changed. Both answers come from metadata the host already has: an object's type, the ``device`` of its tensors, and
per tensor its identity, its storage's data pointer and its version counter (``Tensor._version``, which autograd
bumps on every in-place write: an optimizer step, ``copy_``, ``add_``). Reading a value would synchronise with the
GPU (and fail on a poisoned one); none of this does.

Roots are ``nn.Module``s, optimizers, LR schedulers, ``GradScaler``s and plain CUDA tensors, found under the
namespace's names, and inside dicts, lists, tuples and the attributes of plain objects (a trainer) up to a small
depth. Each object is kept once, under the first path that reaches it (``model`` before ``trainer.model``); a
tensor that is a module's parameter or an optimizer's state is part of that root, not a root of its own.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nb_cudaguard.record.observe import Observed

# How far into containers and plain objects the search goes, and how much it looks at in all: a cell's success path
# pays for this walk whatever it did.
_DEPTH = 3
_CONTAINER_LIMIT = 256
_NODE_LIMIT = 4000
_SKIP_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_SKIP_MODULES = ("numpy", "pandas", "IPython", "ipykernel", "matplotlib", "builtins", "nb_cudaguard")
_PLAIN = (int, float, complex, str, bytes, bool, type(None), range)


@dataclass(frozen=True)
class Root:
    """One object whose state a snapshot keeps: where it is (``path``, a Python expression over the namespace),
    what it is, and its name at the top of the namespace (the name the replay plan knows)."""

    path: str
    kind: str  # "module" | "optimizer" | "scheduler" | "scaler" | "tensor"
    obj: Any
    top: str


def kind_of(value: Any, torch: Any) -> str | None:
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    if isinstance(value, torch.amp.GradScaler):
        return "scaler"
    if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
        return "tensor"
    return None


def may_change_roots(observed: Observed, namespace: dict[str, Any]) -> bool:
    """Whether a cell can have built, changed or dropped a root, from what the journal's observer saw it do: an
    optimizer stepped, or a name it bound, changed, deleted or cannot see into holds anything but a plain value (a
    number, a string, a CPU tensor), a module object, or a function or class that is not the user's own (a user's
    function may bind globals the cell never names). A cell that can not is not followed by the walk."""
    if observed.stepped or observed.deleted:
        return True
    torch = sys.modules.get("torch")
    for name in observed.touched:
        value = namespace.get(name)
        if isinstance(value, (*_PLAIN, types.ModuleType)):
            continue
        if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", "__main__") != "__main__":
            continue
        if torch is not None and isinstance(value, torch.Tensor) and not value.is_cuda:
            continue
        return True
    return False


def find_roots(namespace: dict[str, Any], hidden: Any = ()) -> list[Root]:
    """Every root on the GPU that the namespace reaches, each object once. Empty without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    found: list[Root] = []
    seen: set[int] = set()
    budget = [_NODE_LIMIT]
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in hidden or name in ("In", "Out", "exit", "quit"):
            continue
        _visit(value, name, name, 0, torch, found, seen, budget)
    owned = {id(t) for root in found if root.kind != "tensor" for t in tensors_of(root)}
    owned_memory = {_pointer(t) for root in found if root.kind == "module" for t in tensors_of(root)}
    return [
        root
        for root in found
        if root.kind != "tensor" or (id(root.obj) not in owned and _pointer(root.obj) not in owned_memory)
    ]


def _visit(value: Any, path: str, top: str, depth: int, torch: Any, found: list, seen: set, budget: list) -> None:
    budget[0] -= 1
    if budget[0] < 0 or id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
        return
    seen.add(id(value))
    kind = kind_of(value, torch)
    if kind is not None:
        root = Root(path, kind, value, top)
        if on_device(root, torch):
            found.append(root)
        return
    if depth >= _DEPTH or isinstance(value, _SKIP_TYPES):
        return
    if isinstance(value, dict) and len(value) <= _CONTAINER_LIMIT:
        for key, item in list(value.items()):
            if isinstance(key, (str, int)) and not isinstance(key, bool):
                _visit(item, f"{path}[{key!r}]", top, depth + 1, torch, found, seen, budget)
    elif isinstance(value, (list, tuple)) and len(value) <= _CONTAINER_LIMIT:
        for index, item in enumerate(value):
            _visit(item, f"{path}[{index}]", top, depth + 1, torch, found, seen, budget)
    elif plain_object(value):
        for attribute, item in list(vars(value).items()):
            if attribute.isidentifier() and not attribute.startswith("__"):
                _visit(item, f"{path}.{attribute}", top, depth + 1, torch, found, seen, budget)


def plain_object(value: Any) -> bool:
    """An instance of a user's class (a trainer, a config holding a model), whose attributes may hold state."""
    module = getattr(type(value), "__module__", "") or ""
    return hasattr(value, "__dict__") and module.split(".")[0] not in _SKIP_MODULES and not module.startswith("torch")


def tensors_of(root: Root) -> Iterator[Any]:
    """The tensors that make up a root's state (a scheduler has none: its state is plain Python)."""
    obj, torch = root.obj, sys.modules["torch"]
    if root.kind == "module":
        yield from obj.parameters()
        yield from obj.buffers()
    elif root.kind == "optimizer":
        for group in obj.param_groups:
            yield from group["params"]
        for state in obj.state.values():
            yield from (v for v in state.values() if isinstance(v, torch.Tensor))
    elif root.kind == "scaler":
        yield from (t for t in (getattr(obj, "_scale", None), getattr(obj, "_growth_tracker", None)) if t is not None)
    elif root.kind == "tensor":
        yield obj


def on_device(root: Root, torch: Any) -> bool:
    """Whether the root lives on the GPU: a scheduler does when its optimizer does, a scaler when it is enabled for
    CUDA. The ``is_cuda`` of a tensor is metadata (the simulated GPU answers it the same way)."""
    if root.kind == "scheduler":
        optimizer = getattr(root.obj, "optimizer", None)
        return optimizer is not None and on_device(Root("", "optimizer", optimizer, ""), torch)
    if root.kind == "scaler":
        return bool(getattr(root.obj, "_enabled", False)) and getattr(root.obj, "_device", "cuda") == "cuda"
    for tensor in tensors_of(root):
        return bool(tensor.is_cuda)
    return False


def _pointer(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def fingerprint(root: Root) -> tuple:
    """What changes when the root's state changes, read from metadata only: each tensor's identity, storage
    pointer and version counter; a scheduler's step count; an optimizer's hyperparameters (a scheduler sets lr)."""
    obj = root.obj
    if root.kind == "scheduler":
        return (getattr(obj, "last_epoch", None), getattr(obj, "_step_count", None))
    marks: list[Any] = [(id(t), _pointer(t), t._version) for t in tensors_of(root)]
    if root.kind == "optimizer":
        marks.append(len(obj.state))
        marks += [tuple(sorted((k, v) for k, v in g.items() if isinstance(v, (int, float)))) for g in obj.param_groups]
    elif root.kind == "module":
        marks.append(obj.training)
    return tuple(marks)
