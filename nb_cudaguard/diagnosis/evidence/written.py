"""Where the user wrote a layer's size: an argument of their own module class, or a constant they named.

A fix that says ``nn.Linear(128, 196)`` leaves the user to find what built that layer; when their class takes the
size as an argument (``CarNet(num_classes=195)``) or reads a constant (``NUM_CLASSES = 195``), the fix names that
instead. The layer's call is read from the class's ``__init__`` (``inspect`` finds it for a class defined in a
notebook cell too: IPython keeps each cell in ``linecache``), the construction from the cells of the journal, both
with ``ast``: nothing is run.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from nb_cudaguard.diagnosis.evidence.context import Context
from nb_cudaguard.diagnosis.evidence.static import call_argument, call_name, parse_source
from nb_cudaguard.diagnosis.evidence.workspace import Named
from nb_cudaguard.incident.usercode import is_user_file


@dataclass(frozen=True)
class Written:
    """What to do, in the user's terms, and the line of theirs it changes (when the journal has it)."""

    action: str  # "build model with CarNet(num_classes=196)", "set NUM_CLASSES = 196"
    changes: str | None

    def __str__(self) -> str:
        return self.action + (f" (now `{self.changes}`)" if self.changes else "")


def outputs_written(ctx: Context, layer: Named, wanted: int, named_count: str | None = None) -> Written | None:
    """How to give ``layer`` (``model.classifier``, an ``nn.Linear`` its model's class builds) ``wanted`` outputs
    through the constructor argument or the constant its size comes from. ``named_count``: a constant of the
    user's that already holds ``wanted``, passed instead of the number. None where the size is a number in the
    layer's own call, or its source cannot be read."""
    root_name, _, path = layer.name.partition(".")
    root = ctx.workspace.resolve(root_name)
    init = _own_init(type(root)) if root is not None and path else None
    if init is None:
        return None
    function = _function(init)
    size = _out_features(function, path.split(".")[0]) if function is not None else None
    if function is None or not isinstance(size, ast.Name):
        return None
    parameters = [a.arg for a in function.args.posonlyargs + function.args.args][1:]  # without self
    keywords = [a.arg for a in function.args.kwonlyargs]
    if size.id not in parameters + keywords:
        return _constant(ctx, size.id, wanted, init.__globals__)
    cls = type(root).__name__
    built = ctx.static.called(cls)  # the journal's cells, in order: the last one built the model
    call, line = (built[-1].value, built[-1].line) if built else (None, None)
    passed = _passed(call, size.id, parameters) if isinstance(call, ast.Call) else None
    if isinstance(passed, ast.Name):
        constant = _constant(ctx, passed.id, wanted, ctx.incident.namespace or {})
        if constant is not None:
            return constant
    return Written(f"build {root_name} with {cls}({size.id}={named_count or wanted})", line)


def _own_init(cls: type) -> Any:
    """The ``__init__`` the user wrote for ``cls`` or a base of theirs, not a library's."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            code = getattr(init, "__code__", None)
            return init if code is not None and is_user_file(code.co_filename) else None
    return None


def _function(init: Any) -> ast.FunctionDef | None:
    try:
        source = inspect.getsource(init)
    except (OSError, TypeError):
        return None
    tree = parse_source(source)
    found = tree.body[0] if isinstance(tree, ast.Module) and tree.body else None
    return found if isinstance(found, ast.FunctionDef) else None


def _out_features(function: ast.FunctionDef, attribute: str) -> ast.expr | None:
    """The size given to the last ``Linear`` in ``self.<attribute> = ...`` (the layer, or the last of a
    ``Sequential``)."""
    this = function.args.args[0].arg if function.args.args else "self"
    size = None
    for node in ast.walk(function):
        if not isinstance(node, ast.Assign) or not any(_is_attribute(t, this, attribute) for t in node.targets):
            continue
        for call in ast.walk(node.value):
            if isinstance(call, ast.Call) and call_name(call) == "Linear":
                size = call_argument(call, 1, "out_features")
    return size


def _is_attribute(node: ast.expr, this: str, attribute: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attribute
        and isinstance(node.value, ast.Name)
        and node.value.id == this
    )


def _passed(call: ast.Call, parameter: str, parameters: list[str]) -> ast.expr | None:
    index = parameters.index(parameter) if parameter in parameters else len(call.args)
    return call_argument(call, index, parameter)


def _constant(ctx: Context, name: str, wanted: int, scope: dict) -> Written | None:
    """``NAME = wanted`` for an integer constant of the user's, with the line that sets it now."""
    value = scope.get(name)
    fact = ctx.static.assigned_ints.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return Written(f"set {name} = {wanted}", fact.line if fact is not None else None)
