"""The order a cell runs in, for its names: which it binds before it reads them.

``cellnames`` says which names a cell reads; a name it binds before reading needs no earlier cell, so a replay need
not rebuild it: ``for batch in loader: out = model(batch)`` then ``out.loss`` reads no ``batch`` or ``out`` from
before (a failing cell with its own loop once pulled back the training cell that last bound them). A binding counts
only where it surely runs: not inside ``if``, ``while``, ``try`` or ``match``; a ``for`` body does count (a loop that
ran no time would have failed the read after it in the recorded run too). Function bodies are not followed: their
reads happen when the function is called (``CellNames.deferred``).
"""

from __future__ import annotations

import ast


def root_name(node: ast.AST) -> str | None:
    """``a`` for ``a``, ``a.b.c``, ``a[0].b``: the module-level object an expression reaches into."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def bound_in(node: ast.AST) -> set[str]:
    """Names a function, class or comprehension binds locally (parameters, assignments), to subtract from its
    reads. The parameters of the functions inside count too: a class's ``def forward(self, ids)`` reads no global
    ``self`` or ``ids``."""
    bound: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = child.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None:
                    bound.add(arg.arg)
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            bound.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child is not node:
            bound.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in child.names)
    return bound


def bound_first(tree: ast.AST) -> set[str]:
    """The names ``tree`` binds, surely, before any read of them, in the order its statements run."""
    order = _Order()
    order.visit(tree)
    return order.bound_first


class _Order(ast.NodeVisitor):
    def __init__(self) -> None:
        self.bound_first: set[str] = set()
        self.read: set[str] = set()
        self.conditional = 0

    def _load(self, name: str) -> None:
        if name not in self.bound_first:
            self.read.add(name)

    def _store(self, name: str) -> None:
        if not self.conditional and name not in self.read:
            self.bound_first.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        (self._load if isinstance(node.ctx, ast.Load) else self._store)(node.id)

    def visit_Assign(self, node: ast.Assign) -> None:  # the value runs first
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # ``x += 1`` reads x first
        self.visit(node.value)
        root = root_name(node.target)
        if root is not None:
            self._load(root)
        if not isinstance(node.target, ast.Name):
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for statement in node.body:
            self.visit(statement)
        self._conditionally(node.orelse)

    visit_AsyncFor = visit_For

    def _conditionally(self, nodes: list) -> None:
        self.conditional += 1
        for child in nodes:
            self.visit(child)
        self.conditional -= 1

    def visit_If(self, node: ast.If | ast.While) -> None:
        self.visit(node.test)
        self._conditionally([*node.body, *node.orelse])

    visit_While = visit_If

    def visit_Try(self, node: ast.AST) -> None:
        self._conditionally(list(ast.iter_child_nodes(node)))

    visit_TryStar = visit_Match = visit_Try

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        """What runs when it is defined (decorators, defaults, bases), then its name is bound."""
        for decorator in node.decorator_list:
            self.visit(decorator)
        if isinstance(node, ast.ClassDef):
            for base in [*node.bases, *(k.value for k in node.keywords)]:
                self.visit(base)
        else:
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self.visit(default)
        self._store(node.name)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)

    def _comprehension(self, node: ast.AST) -> None:
        local = bound_in(node)
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and child.id not in local:
                self._load(child.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension
