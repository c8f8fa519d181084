"""The user's objects the diagnosis can reason about, found by duck typing in the failing frames and the namespace.

A notebook namespace can hold tens of thousands of names and multi-gigabyte tensors, so the scan looks at each
name once, with a few ``isinstance`` checks and attribute look-ups on the *type* (so that no property runs on an
unknown object), and keeps only what a cause can use: tensors and arrays, the modules inside models
(embeddings, linear layers, losses), configs, tokenizers, datasets that hold labels, and small integers whose
name says what they count. Nothing here reads a tensor's values.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.diagnosis.tensors import is_array, is_array_like, is_tensor
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.record.copies import COPIES

MAX_NAMES = 20_000
MAX_SUBMODULES = 4_000
MAX_ITEMS = 64  # entries of a dict / tuple batch looked into
_SKIPPED_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_CONFIG_FIELDS = ("vocab_size", "num_labels", "max_position_embeddings", "type_vocab_size")
_COUNT_WORDS = ("class", "label", "vocab", "token", "categor", "n_out", "num_out", "output_dim", "out_dim")


@dataclass
class Named:
    """An object and the expression a user would type to reach it."""

    name: str
    obj: object = field(repr=False, compare=False)  # never compared: == on a device tensor reads it
    where: str = "namespace"


def _module_class():
    nn = sys.modules.get("torch.nn")
    return getattr(nn, "Module", None) if nn is not None else None


def is_module(obj: object) -> bool:
    cls = _module_class()
    return cls is not None and isinstance(obj, cls)


def is_embedding(module: object) -> bool:
    return hasattr(type(module), "forward") and hasattr(module, "num_embeddings") and hasattr(module, "weight")


def is_linear(module: object) -> bool:
    return hasattr(module, "out_features") and hasattr(module, "in_features")


def is_loss(module: object) -> bool:
    return type(module).__name__.endswith("Loss")


def is_config(obj: object) -> bool:
    """A model config (Hugging Face's PretrainedConfig or anything shaped like it), never a module or a tensor."""
    if isinstance(obj, type) or is_module(obj) or is_array_like(obj):
        return False
    fields = getattr(obj, "__dict__", None)
    if not isinstance(fields, dict):
        return False
    return any(key in fields for key in _CONFIG_FIELDS) or ("id2label" in fields and hasattr(type(obj), "num_labels"))


def is_tokenizer(obj: object) -> bool:
    cls = type(obj)
    return callable(getattr(cls, "convert_tokens_to_ids", None)) and hasattr(cls, "__len__")


def is_loader(obj: object) -> bool:
    fields = getattr(obj, "__dict__", None)
    return isinstance(fields, dict) and "dataset" in fields and ("batch_size" in fields or "sampler" in fields)


def config_value(config: object, key: str) -> int | None:
    try:
        value = getattr(config, key, None)
    except Exception:  # a property of a half-built config
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class Workspace:
    tensors: list[Named] = field(default_factory=list)
    embeddings: list[Named] = field(default_factory=list)
    linears: list[Named] = field(default_factory=list)
    losses: list[Named] = field(default_factory=list)
    models: list[Named] = field(default_factory=list)
    configs: list[Named] = field(default_factory=list)
    tokenizers: list[Named] = field(default_factory=list)
    label_sources: list[Named] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    scopes: list[dict] = field(default_factory=list, repr=False)
    _name_by_id: dict[int, str] = field(default_factory=dict, repr=False)
    _seen_modules: set[int] = field(default_factory=set, repr=False)

    # --- lookup
    def name_of(self, obj: object) -> str | None:
        return self._name_by_id.get(id(obj))

    def resolve(self, expression: str) -> object | None:
        """The object an expression from the user's line refers to: names, attributes, constant subscripts."""
        try:
            node = ast.parse(expression.strip(), mode="eval").body
        except SyntaxError:
            return None
        return self._resolve_node(node)

    def _resolve_node(self, node: ast.AST) -> object | None:
        if isinstance(node, ast.Name):
            for scope in self.scopes:
                if node.id in scope:
                    return scope[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base = self._resolve_node(node.value)
            if base is None:
                return None
            try:
                return getattr(base, node.attr, None)
            except Exception:
                return None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            base = self._resolve_node(node.value)
            key: Any = node.slice.value
            if isinstance(base, (Mapping, list, tuple)):
                try:
                    return base[key]
                except (KeyError, IndexError, TypeError):
                    return None
        return None

    def tensors_named(self, *words: str) -> list[Named]:
        return [t for t in self.tensors if any(w in _last_part(t.name) for w in words)]

    # --- building
    def _add_tensor(self, name: str, obj: object, where: str) -> None:
        if id(obj) in self._name_by_id:
            return
        self._name_by_id[id(obj)] = name
        self.tensors.append(Named(name, obj, where))

    def _add_value(self, name: str, value: object, where: str, depth: int = 0) -> None:
        if is_array_like(value):
            self._add_tensor(name, value, where)
        elif is_module(value):
            self._add_module(name, value, where)
        elif isinstance(value, int) and not isinstance(value, bool):
            if where == "namespace" and any(w in name.lower() for w in _COUNT_WORDS):
                self.counts.setdefault(name, value)
        elif isinstance(value, (str, bytes, float, type)) or value is None:
            return
        elif depth == 0 and isinstance(value, Mapping):
            self._add_mapping(name, value, where)
        elif depth == 0 and isinstance(value, (tuple, list)) and value and is_array_like(value[0]):
            for index, item in enumerate(value[:MAX_ITEMS]):
                self._add_value(f"{name}[{index}]", item, where, depth + 1)
        elif is_tokenizer(value):
            self.tokenizers.append(Named(name, value, where))
        elif is_config(value):
            self.configs.append(Named(name, value, where))
        elif is_loader(value):
            self._add_dataset(f"{name}.dataset", value.__dict__["dataset"], where)
        elif _holds_labels(value):
            self._add_dataset(name, value, where)

    def _add_mapping(self, name: str, mapping: Mapping, where: str) -> None:
        try:
            items = list(mapping.items())[:MAX_ITEMS]
        except Exception:
            return
        for key, item in items:
            if isinstance(key, str) and is_array_like(item):
                self._add_tensor(f"{name}[{key!r}]", item, where)

    def _add_module(self, name: str, module: object, where: str) -> None:
        if id(module) in self._seen_modules:
            return
        self._name_by_id.setdefault(id(module), name)
        config = getattr(module, "__dict__", {}).get("config")
        if config is not None and is_config(config):
            self.models.append(Named(name, module, where))
            if all(c.obj is not config for c in self.configs):
                self.configs.append(Named(f"{name}.config", config, where))
        named_modules = getattr(module, "named_modules", None)
        if not callable(named_modules):
            return
        try:
            submodules = named_modules(prefix=name)
        except Exception:
            return
        for count, (qualified, sub) in enumerate(submodules):
            if count >= MAX_SUBMODULES:
                break
            if id(sub) in self._seen_modules:
                continue
            self._seen_modules.add(id(sub))
            self._name_by_id.setdefault(id(sub), qualified)
            if is_embedding(sub):
                self.embeddings.append(Named(qualified, sub, where))
            elif is_linear(sub):
                self.linears.append(Named(qualified, sub, where))
            elif is_loss(sub):
                self.losses.append(Named(qualified, sub, where))

    def _add_dataset(self, name: str, dataset: object, where: str) -> None:
        fields = getattr(dataset, "__dict__", None)
        if not isinstance(fields, dict):
            return
        for key in ("targets", "labels", "y"):
            value = fields.get(key)
            if is_array_like(value):
                self.label_sources.append(Named(f"{name}.{key}", value, where))
                return
            if isinstance(value, list) and value and isinstance(value[0], int) and "numpy" in sys.modules:
                array = sys.modules["numpy"].asarray(value[:1_000_000])
                self.label_sources.append(Named(f"{name}.{key}", array, where))
                return
        tensors = fields.get("tensors")
        if isinstance(tensors, tuple) and len(tensors) >= 2 and is_array_like(tensors[-1]):
            self.label_sources.append(Named(f"{name}.tensors[{len(tensors) - 1}]", tensors[-1], where))


def _holds_labels(value: object) -> bool:
    fields = getattr(value, "__dict__", None)
    if not isinstance(fields, dict) or not callable(getattr(type(value), "__getitem__", None)):
        return False
    return any(key in fields for key in ("targets", "labels", "tensors"))


def _last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def _scan(workspace: Workspace, items: Iterable[tuple[str, object]], where: str) -> None:
    for count, (name, value) in enumerate(items):
        if count >= MAX_NAMES:
            break
        if not isinstance(name, str) or name.startswith("_") or name in _SKIPPED_NAMES:
            continue
        workspace._add_value(name, value, where)


def build_workspace(incident: Incident) -> Workspace:
    """The namespace's names win (they are what the user typed); the failing functions' locals come next."""
    workspace = Workspace()
    namespace = incident.namespace or {}
    local_scopes = [f.locals for f in reversed(incident.user_frames) if f.locals and f.locals is not namespace]
    local_scopes = [scope for scope in local_scopes if scope.get("__name__") is None]
    workspace.scopes = [*local_scopes, namespace] if namespace else local_scopes
    if namespace:
        _scan(workspace, list(namespace.items()), "namespace")
    for frame in reversed(incident.user_frames):
        if frame.locals and frame.locals.get("__name__") is None:
            _scan(workspace, frame.locals.items(), f"{frame.function}()")
    _name_copies_as_their_sources(workspace)
    _scan_library_frames(workspace, incident)
    return workspace


def _name_copies_as_their_sources(workspace: Workspace) -> None:
    """A function's device tensor that the runtime saw copied from a host tensor of the namespace is known to the
    user by that tensor's name: ``model(segment_ids.to(device))`` reaches ``forward`` as ``token_type_ids``."""
    for named in workspace.tensors:
        if named.where == "namespace":
            continue
        own = workspace.name_of(COPIES.source_of(named.obj))
        if own is not None:
            named.name = own
            workspace._name_by_id[id(named.obj)] = own


def _scan_library_frames(workspace: Workspace, incident: Incident) -> None:
    """The device tensors a library's own frames hold (a ``Trainer``'s batch, the labels its model's ``forward``
    got), outermost first (the names nearest the user's call): only those the runtime saw copied from the host
    (``record.copies``), whose values can still be read there; the rest of a library's locals are its own."""
    error = incident.exception
    tb = error.__traceback__ if error is not None else None
    scopes = []
    while tb is not None:
        scopes.append(tb.tb_frame)
        tb = tb.tb_next
    namespace = incident.namespace
    for frame in scopes:
        scope = frame.f_locals
        if scope is namespace or scope.get("__name__") is not None:
            continue
        where = f"{frame.f_code.co_name}()"
        for name, value in list(scope.items())[:MAX_ITEMS]:
            if isinstance(value, Mapping) and not isinstance(value, type):
                items = [(f"{name}[{k!r}]", v) for k, v in list(value.items())[:MAX_ITEMS] if isinstance(k, str)]
            else:
                items = [(name, value)]
            for label, item in items:
                source = COPIES.source_of(item) if is_tensor(item) else None
                if source is not None and workspace.name_of(source) is None:  # else the user's own name has it
                    workspace._add_tensor(label, item, where)


__all__ = ["Named", "Workspace", "build_workspace", "config_value", "is_array", "is_tensor"]
