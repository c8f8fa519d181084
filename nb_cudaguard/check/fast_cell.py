"""The fast checks around every cell: the board is read when the cell's own code has finished, and a fired check
becomes the cell's error.

A ``post_run_cell`` hook cannot make a cell fail (IPython prints a hook's exception and carries on), so the read
is part of the cell itself: an IPython AST transformer wraps the cell's last expression as ``cell_end(value)``
(so ``Out[n]`` still shows it) or appends ``cell_end(None)``. A cell that raised before its end never reaches that
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


class CellEnd(ast.NodeTransformer):
    """IPython AST transformer: end every cell with ``cell_end``, keeping its last expression displayed."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        if not node.body:
            return node
        last = node.body[-1]
        if isinstance(last, ast.Expr):
            last.value = ast.copy_location(self._call(last.value), last.value)
        else:
            end = ast.Expr(self._call(ast.Constant(None)))
            node.body.append(ast.copy_location(end, last))
        ast.fix_missing_locations(node)
        return node

    @staticmethod
    def _call(value: ast.expr) -> ast.Call:
        """``__import__("nb_cudaguard.check.fast_cell", fromlist=["cell_end"]).cell_end(value)``: no name of ours
        in the user's namespace for a ``%reset`` or a ``del`` to remove."""
        module = ast.Call(
            func=ast.Name("__import__", ast.Load()),
            args=[ast.Constant(_MODULE)],
            keywords=[ast.keyword("fromlist", ast.List([ast.Constant("cell_end")], ast.Load()))],
        )
        return ast.Call(func=ast.Attribute(module, "cell_end", ast.Load()), args=[value], keywords=[])
