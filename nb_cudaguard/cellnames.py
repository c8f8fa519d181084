"""Which module-level names a cell binds, mutates, deletes and reads, from its AST.

The replay plan needs to know which earlier cells rebuild the names a failing cell reads. A static answer is
enough and cheap: we run it only when a plan is asked for, never on the success path of a cell.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

_BUILTINS = frozenset(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit"}


@dataclass
class CellNames:
    defined: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    side_effects: set[str] = field(default_factory=set)  # "shell", "magic", "file_write"
    syntax_error: str | None = None

    def to_dict(self) -> dict:
        return {
            "defined": sorted(self.defined),
            "mutated": sorted(self.mutated),
            "deleted": sorted(self.deleted),
            "used": sorted(self.used),
            "side_effects": sorted(self.side_effects),
        }


def _root_name(node: ast.AST) -> str | None:
    """``a`` for ``a``, ``a.b.c``, ``a[0].b``: the module-level object an expression reaches into."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound_in(node: ast.AST) -> set[str]:
    """Names a function or comprehension binds locally (parameters, assignments), to subtract from its reads."""
    bound: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                bound.add(arg.arg)
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            bound.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child is not node:
            bound.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in child.names)
    return bound


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names = CellNames()

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

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.names.side_effects.add("star_import")
            else:
                self.names.defined.add(alias.asname or alias.name)

    def _visit_scope(self, node: ast.AST) -> None:
        """Functions and classes: their global reads are the cell's reads; ``global x`` inside binds x."""
        local = _bound_in(node)
        declared_global: set[str] = set()
        for child in ast.walk(node):
            if isinstance(child, ast.Global):
                declared_global.update(child.names)
        for child in ast.walk(node):
            if isinstance(child, ast.Name):
                if isinstance(child.ctx, ast.Load) and (child.id not in local or child.id in declared_global):
                    self.names.used.add(child.id)
                elif child.id in declared_global:
                    self.names.defined.add(child.id)
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
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
        local = _bound_in(node)
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in local:
                self.names.used.add(child.id)
            elif isinstance(child, ast.NamedExpr):  # a walrus in a comprehension binds in the enclosing scope
                self.names.defined.add(child.target.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    # --- mutation of existing objects
    def _mutates(self, target: ast.AST) -> None:
        root = _root_name(target)
        if root is not None and not isinstance(target, ast.Name):
            self.names.mutated.add(root)
            self.names.used.add(root)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._mutates(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        root = _root_name(node.target)
        if root is not None:
            self.names.used.add(root)
            if isinstance(node.target, ast.Name):
                self.names.defined.add(root)
            else:
                self.names.mutated.add(root)
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
        if isinstance(func, ast.Attribute):
            root = _root_name(func.value)
            if root is not None:
                self.names.mutated.add(root)
        is_ipython_call = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
        if is_ipython_call and func.attr in ("run_line_magic", "run_cell_magic", "system"):
            self.names.side_effects.add("shell" if func.attr == "system" else "magic")
        if isinstance(func, ast.Name) and func.id == "open":
            self.names.side_effects.add("file_io")
        self.generic_visit(node)


def analyse(source: str) -> CellNames:
    """Names of a cell's source, which must already be plain Python (IPython's ``transform_cell`` output)."""
    try:
        tree = ast.parse(source)
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
    return names
