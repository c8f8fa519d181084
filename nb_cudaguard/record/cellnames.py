"""Which module-level names a cell binds, mutates, deletes and reads, from its AST.

The replay plan needs to know which earlier cells rebuild the names a failing cell reads. A static answer is
enough and cheap: we run it only when a plan is asked for, never on the success path of a cell.

Cells may hold IPython syntax (``%magic``, ``!cmd``, ``x = !ls``): they are turned into plain Python with IPython's
own transformer first, and the Python inside ``%time``/``%%capture``-style magics is analysed as part of the cell.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nb_cudaguard.record.cellorder import bound_first, bound_in, root_name

if TYPE_CHECKING:
    from nb_cudaguard.record.observe import Observed

_BUILTINS = frozenset(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit"}

# Magics whose argument (line magics) or body (cell magics) is Python that runs in the user namespace.
_PYTHON_LINE_MAGICS = frozenset({"time", "timeit", "prun", "debug"})
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "prun", "capture", "debug", "cudacheck"})
# Methods that only read their object (a tensor's ``sum``, a dict's ``get``...). Any other method call counts as
# a possible mutation of the object it is called on; being wrong that way only makes a replay plan longer.
_READ_ONLY_METHODS = frozenset(
    {
        "all", "any", "argmax", "argmin", "clone", "copy", "count", "detach", "dim", "endswith", "format", "get",
        "index", "item", "items", "join", "keys", "max", "mean", "min", "named_parameters", "numel", "numpy",
        "parameters", "size", "split", "startswith", "state_dict", "std", "sum", "tolist", "values",
    }
)  # fmt: skip


@dataclass
class CellNames:
    defined: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    # "shell", "magic", "star_import"; a file the cell wrote is none (files outlive a restart: writing a log or a
    # checkpoint is no reason to run the cell again)
    side_effects: set[str] = field(default_factory=set)
    # Names the cell binds at top level, unconditionally, without reading them first: earlier bindings of these
    # names do not matter to later cells, which lets the replay plan leave the earlier cells out.
    rebound: set[str] = field(default_factory=set)
    # Names whose only "mutation" is a method call (``np.zeros(3)``, ``lst.append(1)``): for a module that is
    # no mutation at all, so the replay plan ignores these for names bound by imports.
    call_mutated: set[str] = field(default_factory=set)
    imported: set[str] = field(default_factory=set)  # names bound by ``import`` statements
    # Globals read inside function bodies: read when the function is called, not when the cell runs, so they are
    # needed in the state the *caller* sees.
    deferred: set[str] = field(default_factory=set)
    # Functions that bind globals (``global x; x = ...``): calling them binds those names in the caller's cell.
    function_globals: dict[str, set[str]] = field(default_factory=dict)
    magics: list[tuple[str, str]] = field(default_factory=list)  # (name, line) of each magic the cell runs
    syntax_error: str | None = None
    observed: bool = False  # ``mutated`` is what the runtime saw change (``observe``), not only the source's guess

    def merge(self, other: CellNames) -> None:
        """Fold in the names of code that runs inside this cell (the body of ``%%time``, ``%%capture``...)."""
        self.defined |= other.defined
        self.mutated |= other.mutated
        self.call_mutated |= other.call_mutated
        self.imported |= other.imported
        self.deferred |= other.deferred
        self.function_globals.update(other.function_globals)
        self.deleted |= other.deleted
        self.used |= other.used
        self.side_effects |= other.side_effects
        self.magics.extend(other.magics)

    def observe(self, seen: Observed) -> None:
        """Put what the runtime saw in place of the source's guesses: of the objects the cell named, those the
        runtime sees into changed only if it saw them change; containers and opaque objects keep the source's
        verdict; a module an optimizer stepped changed though the cell never named it."""
        guessed = seen.opaque | seen.partial
        self.mutated = (self.mutated & guessed) | seen.changed
        self.call_mutated &= self.mutated
        self.deleted |= seen.deleted
        self.observed = True

    def to_dict(self) -> dict:
        return {
            "observed": self.observed,
            "defined": sorted(self.defined),
            "mutated": sorted(self.mutated),
            "deleted": sorted(self.deleted),
            "used": sorted(self.used),
            "side_effects": sorted(self.side_effects),
            "rebound": sorted(self.rebound),
            "call_mutated": sorted(self.call_mutated),
            "imported": sorted(self.imported),
            "deferred": sorted(self.deferred),
            "function_globals": {name: sorted(bound) for name, bound in self.function_globals.items()},
            "magics": [list(m) for m in self.magics],
        }


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names = CellNames()
        self.call_roots: set[str] = set()
        self.assign_roots: set[str] = set()

    # --- bindings at module level
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.names.defined.add(node.id)
        elif isinstance(node.ctx, ast.Del):
            self.names.deleted.add(node.id)
        else:
            self.names.used.add(node.id)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.names.defined.add((alias.asname or alias.name).split(".")[0])
            self.names.imported.add((alias.asname or alias.name).split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.names.side_effects.add("star_import")
            else:
                self.names.defined.add(alias.asname or alias.name)
                self.names.imported.add(alias.asname or alias.name)

    def _visit_scope(self, node: ast.AST) -> None:
        """Functions and classes: their global reads are the cell's reads; ``global x`` inside binds x."""
        local = bound_in(node)
        declared_global: set[str] = set()
        for child in ast.walk(node):
            if isinstance(child, ast.Global):
                declared_global.update(child.names)
        is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        in_functions = {
            id(inner)
            for function in ast.walk(node)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and function is not node
            for inner in ast.walk(function)
        }
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                if isinstance(child.ctx, ast.Load) and (child.id not in local or child.id in declared_global):
                    self.names.used.add(child.id)
                    if is_function or id(child) in in_functions:
                        self.names.deferred.add(child.id)
                elif child.id in declared_global:
                    self.names.defined.add(child.id)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.names.function_globals.setdefault(node.name, set()).add(child.id)
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.names.defined.add(node.name)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        self._visit_scope(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.names.defined.add(node.name)
        for base in [*node.bases, *(k.value for k in node.keywords)]:
            self.visit(base)
        self._visit_scope(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scope(node)

    def _visit_comprehension(self, node: ast.AST) -> None:
        local = bound_in(node)
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in local:
                self.names.used.add(child.id)
            elif isinstance(child, ast.NamedExpr):  # a walrus in a comprehension binds in the enclosing scope
                self.names.defined.add(child.target.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    # --- mutation of existing objects
    def _mutates(self, target: ast.AST) -> None:
        root = root_name(target)
        if root is not None and not isinstance(target, ast.Name):
            self.names.mutated.add(root)
            self.assign_roots.add(root)
            self.names.used.add(root)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._mutates(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        root = root_name(node.target)
        if root is not None:
            self.names.used.add(root)
            if isinstance(node.target, ast.Name):
                self.names.defined.add(root)
            else:
                self.names.mutated.add(root)
                self.assign_roots.add(root)
        self.visit(node.value)
        if not isinstance(node.target, ast.Name):
            self.generic_visit(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._mutates(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._mutates(target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        # obj.method(...) may change obj in place (list.append, model.to, optimizer.step): count it as a mutation.
        if isinstance(func, ast.Attribute) and func.attr not in _READ_ONLY_METHODS:
            root = root_name(func.value)
            if root is not None:
                self.names.mutated.add(root)
                self.call_roots.add(root)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):  # get_ipython().method(...)
            if func.attr in ("run_line_magic", "run_cell_magic"):
                self.names.side_effects.add("magic")
                self._visit_magic(func.attr == "run_cell_magic", node.args)
            elif func.attr in ("system", "getoutput"):
                self.names.side_effects.add("shell")
        self.generic_visit(node)

    def _visit_magic(self, is_cell: bool, args: list[ast.expr]) -> None:
        texts = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in args]
        if len(texts) < 2 or texts[0] is None or texts[1] is None:
            return
        name, line = texts[0], texts[1]
        self.names.magics.append((name, line))
        if is_cell and len(texts) > 2 and texts[2] is not None and name in _PYTHON_CELL_MAGICS:
            self.names.merge(analyse(texts[2]))
            if name == "capture":  # ``%%capture out`` binds ``out``
                target = next((w for w in line.split() if not w.startswith("-")), None)
                if target is not None and target.isidentifier():
                    self.names.defined.add(target)
        elif not is_cell and name in _PYTHON_LINE_MAGICS and line.strip():
            self.names.merge(analyse(line))


def _top_level_bindings(tree: ast.Module) -> set[str]:
    """Names each top-level statement binds whatever happens (no ``if``/``for``/``try`` around the binding)."""
    bound: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        bound.add(node.id)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and isinstance(stmt.target, ast.Name):
            bound.add(stmt.target.id)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(stmt.name)
        elif isinstance(stmt, ast.Import):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            bound.update(a.asname or a.name for a in stmt.names if a.name != "*")
    return bound


def _parse(source: str) -> ast.Module:
    """Plain Python first; IPython syntax (magics, ``!`` lines) through IPython's own transformer."""
    try:
        return ast.parse(source)
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager

        transformed = TransformerManager().transform_cell(source)
        if transformed == source:
            raise
        return ast.parse(transformed)


def analyse(source: str) -> CellNames:
    """Names of a cell's source: plain Python, or IPython syntax, which is transformed first."""
    try:
        tree = _parse(source)
    except SyntaxError as exc:
        names = CellNames()
        names.syntax_error = f"{exc.msg} (line {exc.lineno})"
        return names
    visitor = _Visitor()
    visitor.visit(tree)
    names = visitor.names
    names.used -= _BUILTINS - names.defined
    names.mutated -= {"get_ipython"}
    names.used.discard("get_ipython")
    names.deferred &= names.used
    names.used -= bound_first(tree) - names.deferred
    names.rebound = _top_level_bindings(tree) - names.used
    names.call_mutated |= visitor.call_roots - visitor.assign_roots
    names.call_mutated -= {"get_ipython"}
    return names
