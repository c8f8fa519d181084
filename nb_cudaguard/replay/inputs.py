"""Where the failing cell's data comes from, for the printed replay plan: for each name it reads that a kept cell
binds, that cell and the line that binds it. A plan row shows only a cell's first line, and the line that built the
bad values (``labels = torch.tensor([...])``) is the one the user wants to see before choosing what to replay."""

from __future__ import annotations

import ast

from nb_cudaguard.record.cellorder import bound_in
from nb_cudaguard.record.journal import CellRecord


def inputs_text(target: CellRecord | None, kept: list[CellRecord], mode: str) -> list[str]:
    """Where the failing cell's data comes from: for each name it reads that a kept cell binds (modules aside), the
    last kept cell before it that binds the name and the line that does, since a plan row shows only a cell's first
    line and the line that built the bad values (``labels = torch.tensor([...])``) is the one the user wants to see
    before choosing what to replay."""
    if target is None or mode == "rebuild" or not kept:
        return []
    reads = target.names.used | target.names.mutated
    found: dict[str, tuple[CellRecord, int, str]] = {}
    for record in kept:
        wanted = (record.names.defined - record.names.imported) & reads
        for name, (number, text) in _binding_lines(record, wanted).items():
            found[name] = (record, number, text)  # a later kept cell that binds it again wins
    if not found:
        return []
    shown = sorted(found)[:8]
    width = max(len(name) for name in shown)
    lines = [f"Where the failing cell {target.label} gets what it reads:"]
    for name in shown:
        record, number, text = found[name]
        text = text if len(text) <= 60 else text[:59] + "…"
        lines.append(f"  {name:<{width}}  {record.label} line {number}: {text}")
    if len(found) > len(shown):
        lines.append(f"  … and {len(found) - len(shown)} more")
    return lines


_CONDITIONAL = (ast.If, ast.While, ast.Try, *((ast.Match,) if hasattr(ast, "Match") else ()))


def _binding_lines(record: CellRecord, names: set[str]) -> dict[str, tuple[int, str]]:
    """For each of ``names``, the number and text of the last top-level statement of the cell that surely binds it
    (else the last that may); a name no statement binds at top level, or a cell that cannot be parsed, gives none.
    The cell is parsed once for all its names."""
    if not names:
        return {}
    source = record.transformed if record.transformed is not None else record.source
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    sure: dict[str, ast.stmt] = {}
    maybe: dict[str, ast.stmt] = {}  # a binding under ``if``/``while``/``try`` may not have run: sure ones first
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in bound_in(statement) & names:
            (maybe if isinstance(statement, _CONDITIONAL) else sure)[name] = statement
    lines = source.splitlines()
    found = {}
    for name in names:
        hit = sure.get(name) or maybe.get(name)
        if hit is not None:
            found[name] = (hit.lineno, lines[hit.lineno - 1].strip() if hit.lineno <= len(lines) else "")
    return found
