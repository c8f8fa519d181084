"""The new process's side: skip the training cells, check the rebuilt objects, load the snapshot into them.

The replay runs the plan in order and asks ``skip(record)`` before each cell. At the first cell the snapshot
replaces, every object it restores has been rebuilt by the cells replayed so far, so each is checked against the
snapshot then: the same class, the same tensor names, shapes and dtypes, on the GPU as before. An object that does
not match is not loaded: the cells that trained it run after all (and the other objects those cells train are then
trained by them, not loaded), and the report says why. After a skipped cell the random generators are set to the
states that cell left, so the cells replayed after it draw the numbers they drew the first time. Once the replay
passes the cell the snapshot was taken after, the state is loaded into the objects: tensors are written in place
(``copy_``, so the rebuilt object's dtype, memory format and device stay), the optimizer's state through its own
``load_state_dict``, which binds it to the rebuilt parameters, the scheduler and the scaler likewise.
"""

from __future__ import annotations

import ast
import threading
import time
from typing import Any

from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.replay.plan import PlanStep, ReplayPlan
from nb_cudaguard.snapshot.copy import set_rng_states
from nb_cudaguard.snapshot.files import SnapshotManifest, load
from nb_cudaguard.snapshot.held import put_back
from nb_cudaguard.snapshot.store import size_text


class Restorer:
    def __init__(self, manifest: SnapshotManifest) -> None:
        self.manifest = manifest
        self.skips = dict(manifest.skips)
        self.checked = False
        self.loaded = False
        self.skipped: list[int] = []
        self.problems: dict[str, str] = {}  # path -> why it was not loaded
        self.held: dict[str, list[str]] = {}  # name -> the attributes given back (``held``)
        self.failure: str | None = None
        self.load_seconds = 0.0
        self._content: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._read, name="nb_cudaguard-snapshot", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, manifest: SnapshotManifest | None) -> Restorer | None:
        return cls(manifest) if manifest is not None else None

    def _read(self) -> None:
        try:
            self._content = load(self.manifest)
        except Exception as exc:
            self.failure = f"the snapshot could not be read ({type(exc).__name__}: {exc})"

    def skip(self, record: CellRecord, namespace: dict) -> bool:
        """Whether to skip this cell; loads the snapshot first once the replay has passed its boundary."""
        if record.seq > self.manifest.seq:
            self.finish(namespace)
        if record.seq not in self.skips:
            return False
        if not self.checked:
            self._check(namespace, {p for paths in self.skips.values() for p in paths})
        if record.seq not in self.skips:
            return False
        self.skipped.append(record.seq)
        assert self._content is not None  # _check dropped every skip otherwise
        set_rng_states(self._content["rng"][record.seq])
        return True

    def _check(self, namespace: dict, paths: set[str]) -> None:
        self.checked = True
        self._thread.join()
        if self._content is None:
            self.skips.clear()
            return
        for path in sorted(paths):
            saved = self._content["roots"][path]
            try:
                why = mismatch(resolve(path, namespace), saved)
            except (LookupError, AttributeError, SyntaxError, ValueError) as exc:
                why = f"it is not there after the replay ({type(exc).__name__}: {exc})"
            if why is not None:
                self.problems[path] = why
        replayed = set(self.problems)
        while True:  # cells that train an object not loaded run, and so what they train is not loaded either
            running = [seq for seq, paths in self.skips.items() if replayed & set(paths)]
            if not running:
                break
            for seq in running:
                replayed |= set(self.skips.pop(seq))
        for path in replayed - set(self.problems):
            self.problems[path] = "trained again by a cell that runs because of another object"

    def finish(self, namespace: dict) -> None:
        """Load the snapshot into the rebuilt objects (once, and only if a cell was skipped for it)."""
        if self.loaded or not (self.skipped or self.manifest.extra):
            return
        self.loaded = True
        begun = time.perf_counter()
        self._check(namespace, set(self.manifest.extra))  # objects only cells the plan leaves out trained
        if self._content is None:
            return
        if self.skipped:
            self._put_held(namespace, self._content.get("held", {}))
        restored = self._restored() - set(self.problems)
        for path in sorted(restored):
            try:
                put(resolve(path, namespace), self._content["roots"][path])
            except Exception as exc:  # checked before, so this is a bug or a cell that changed it since
                self.problems[path] = f"loading failed ({type(exc).__name__}: {exc})"
        self.load_seconds = time.perf_counter() - begun
        self._content = None

    def _put_held(self, namespace: dict, held: dict[str, Any]) -> None:
        """Give the rebuilt objects what the skipped cells' calls set in them (before the roots are loaded: the
        optimizer a ``Trainer`` built is among them)."""
        for top, content in sorted(held.items()):
            try:
                self.held[top] = put_back(namespace[top], content)
            except Exception as exc:  # the rebuilt object lacks a path the pickle names: its own state starts over
                self.problems[f"what the skipped cells set in {top}"] = f"{type(exc).__name__}: {exc}"

    def _restored(self) -> set[str]:
        return {p for seq in self.skipped for p in self.manifest.skips[seq]} | set(self.manifest.extra)

    def conclude(self, plan: ReplayPlan, namespace: dict) -> str:
        """At the end of the replay: load the snapshot if the replay did not pass its cell, move the skipped cells
        out of the plan with their row's wording, and return what the summary says about it."""
        self.finish(namespace)
        rows, skipped = self.manifest.rows, set(self.skipped)
        moved = [PlanStep(s.record, rows.get(s.record.seq, "restored")) for s in plan.steps if s.record.seq in skipped]
        plan.steps = [s for s in plan.steps if s.record.seq not in skipped]
        plan.excluded = sorted([*plan.excluded, *moved], key=lambda s: s.record.seq)
        return self.note({s.record.seq: s.record.label for s in moved})

    def note(self, labels: dict[int, str]) -> str:
        manifest = self.manifest
        if self.failure is not None:
            return f"snapshot not used: {self.failure}; the training cells were replayed"
        restored = sorted(self._restored() - set(self.problems))
        restored += [f"{top}.{name}" for top, names in sorted(self.held.items()) for name in names if name[0] != "_"]
        text = ""
        if restored:
            cells = ", ".join(labels.get(seq, f"#{seq}") for seq in self.skipped)
            instead = f"instead of replaying {cells}" if cells else "(the plan does not replay their training)"
            text = (
                f"restored {', '.join(restored)} from the snapshot of cell {manifest.label} "
                f"({size_text(manifest.nbytes)}) in {self.load_seconds:.2f} s {instead}"
            )
        if self.problems:
            text += (
                ("; " if text else "")
                + "replayed instead of restored: "
                + "; ".join(f"{path} ({why})" for path, why in sorted(self.problems.items()))
            )
        return text


def resolve(path: str, namespace: dict) -> Any:
    """The object at a path such as ``trainer.model`` or ``state['opt']`` (written by ``find``): names, attributes
    and literal keys only, nothing evaluated."""
    node = ast.parse(path, mode="eval").body
    steps: list[tuple[str, Any]] = []
    while not isinstance(node, ast.Name):
        if isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript):
            steps.append(("item", ast.literal_eval(node.slice)))
            node = node.value
        else:
            raise ValueError(f"{path} is not a path")
    value = namespace[node.id]
    for kind, key in reversed(steps):
        value = getattr(value, key) if kind == "attr" else value[key]
    return value


def _class(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def mismatch(obj: Any, saved: dict) -> str | None:
    """Why the rebuilt object cannot take the snapshot, or None."""
    if _class(obj) != saved["cls"]:
        return f"rebuilt as {_class(obj)}, the snapshot is of a {saved['cls']}"
    state, kind = saved["state"], saved["kind"]
    if kind == "module":
        return _tensors_mismatch(obj.state_dict(keep_vars=True), state["tensors"])
    if kind == "tensor":
        return _tensors_mismatch({"": obj}, {"": state["tensor"]})
    if kind == "optimizer":
        groups, saved_groups = obj.param_groups, state["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in saved_groups]:
            return "its parameter groups differ from the snapshot's"
        params = [p for g in groups for p in g["params"]]
        for index, values in state["state"].items():
            for name, value in values.items():
                if getattr(value, "dim", lambda: 0)() and tuple(value.shape) != tuple(params[index].shape):
                    return f"its parameter {index} has shape {tuple(params[index].shape)}, its {name} in the " \
                        f"snapshot {tuple(value.shape)}"  # fmt: skip
    return None


def _tensors_mismatch(now: dict, saved: dict) -> str | None:
    if set(now) != set(saved):
        extra, lacking = sorted(set(now) - set(saved)), sorted(set(saved) - set(now))
        return f"its tensors differ (new: {', '.join(extra[:3]) or '-'}; gone: {', '.join(lacking[:3]) or '-'})"
    for name, tensor in now.items():
        old = saved[name]
        label = name or "it"
        if tuple(tensor.shape) != tuple(old.shape) or tensor.dtype != old.dtype:
            return f"{label} is {tuple(tensor.shape)} {tensor.dtype}, the snapshot's {tuple(old.shape)} {old.dtype}"
        if not tensor.is_cuda:
            return f"{label} was rebuilt on {tensor.device}, not on the GPU"
    return None


def put(obj: Any, saved: dict) -> None:
    import torch

    state, kind = saved["state"], saved["kind"]
    with torch.no_grad():
        if kind == "module":
            for name, tensor in obj.state_dict(keep_vars=True).items():
                tensor.copy_(state["tensors"][name])
            for module, training in zip(obj.modules(), state["training"], strict=True):
                module.training = training
        elif kind == "tensor":
            obj.copy_(state["tensor"])
    if kind in ("optimizer", "scheduler"):
        obj.load_state_dict(state)
    elif kind == "scaler":
        for name, value in state.items():
            on_device = isinstance(value, torch.Tensor)
            setattr(obj, name, value.to(state.get("_device", "cuda")) if on_device else value)
