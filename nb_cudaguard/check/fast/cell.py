"""The fast checks around every cell: the board is read when the cell's own code has finished, and a fired check
becomes the cell's error.

A ``post_run_cell`` hook cannot make a cell fail (IPython prints a hook's exception and carries on), so the read
is part of the cell itself: the cell's tree wraps its last expression as ``cell_end(value)`` (so ``Out[n]`` still
shows it) or appends ``cell_end(None)``. That edit is made by the shell's ``transform_ast``, wrapped for this shell
(:func:`install`), not by an entry of its ``ast_transformers``: while that list holds anything, IPython fixes the
source locations of every node of every cell (about 1 µs a node, 50 µs for a five-line cell), and only the call
added here lacks them. A cell that raised before its end never reaches that
call; ``EveryCell.post_run_cell`` then reads the board and, if a check fired first, says so under the error.
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

_MODULE = __name__


class CellFinisher(Protocol):
    """What ``cell_end`` asks the every-cell checks: the error for this cell, if a check fired."""

    def finish_cell(self) -> BaseException | None: ...


CURRENT: list[CellFinisher] = []  # the every-cell checks of the shell in fast mode (at most one)


def cell_end(value: Any = None) -> Any:
    """Called by the cell's last line: raise the fired check's error, or hand the value back for display."""
    if CURRENT:
        error = CURRENT[-1].finish_cell()
        if error is not None:
            raise error
    return value


class EndingTransform:
    """The shell's ``transform_ast`` followed by :class:`CellEnd`; the cell runs unchanged if the edit fails (its
    ``post_run_cell`` reads the boards then)."""

    def __init__(self, original: Any) -> None:
        self.original = original
        self.end = CellEnd()

    def __call__(self, node: Any) -> Any:
        node = self.original(node)
        try:
            return self.end.visit(node)
        except Exception:
            return node


def install(shell: Any) -> None:
    """End every cell of ``shell`` with ``cell_end``."""
    if not isinstance(shell.__dict__.get("transform_ast"), EndingTransform):
        shell.transform_ast = EndingTransform(shell.transform_ast)


def uninstall(shell: Any) -> None:
    """Stop; a wrapper someone put over ours meanwhile is left in place (ours then ends cells with no checks on,
    which reads nothing)."""
    if isinstance(shell.__dict__.get("transform_ast"), EndingTransform):
        del shell.transform_ast


def installed(shell: Any) -> bool:
    return isinstance(shell.__dict__.get("transform_ast"), EndingTransform)


class CellEnd(ast.NodeTransformer):
    """End a cell's tree with ``cell_end``, keeping its last expression displayed."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        if not node.body:
            return node
        last = node.body[-1]
        if isinstance(last, ast.Expr):
            last.value = self._call(last.value, last.value)
        else:
            value = _at(ast.Constant(None), last)
            node.body.append(_at(ast.Expr(self._call(value, last)), last))
        return node

    @staticmethod
    def _call(value: ast.expr, where: ast.AST) -> ast.Call:
        """``__import__("nb_cudaguard.check.fast.cell", fromlist=["cell_end"]).cell_end(value)``: no name of ours
        in the user's namespace for a ``%reset`` or a ``del`` to remove. Every node made here is placed at
        ``where`` as it is made (the user's own nodes keep theirs), so no walk of the tree is needed."""
        names = _at(ast.List([_at(ast.Constant("cell_end"), where)], ast.Load()), where)
        module = _at(
            ast.Call(
                func=_at(ast.Name("__import__", ast.Load()), where),
                args=[_at(ast.Constant(_MODULE), where)],
                keywords=[_at(ast.keyword("fromlist", names), where)],
            ),
            where,
        )
        end = _at(ast.Attribute(module, "cell_end", ast.Load()), where)
        return _at(ast.Call(func=end, args=[value], keywords=[]), where)


def _at(node: Any, where: ast.AST) -> Any:
    return ast.copy_location(node, where)
