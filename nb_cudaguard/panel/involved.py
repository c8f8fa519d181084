"""The tensors a failure involves, one line each: what the diagnosis names, then what the failing line reads.

The panel shows them so the user sees shapes, dtypes and value ranges next to the explanation without typing
``labels.max()`` into a kernel that may be poisoned. Values are read by ``diagnosis.tensors.summarize``, which
reads CUDA tensors only while the context is healthy.
"""

from __future__ import annotations

import ast
import re

from nb_cudaguard.diagnosis.evidence.workspace import build_workspace
from nb_cudaguard.diagnosis.tensors import is_array_like, summarize
from nb_cudaguard.panel.report import Report

SHOWN = 8
_NAME = re.compile(r"[A-Za-z_][\w.]*")


def _expressions_on(line: str) -> list[str]:
    """Names, attribute chains and constant subscripts on a source line, in reading order."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:  # one line of a longer statement
        return _NAME.findall(line)
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Name | ast.Attribute | ast.Subscript)]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset, -(n.end_col_offset or 0)))
    return [ast.unparse(n) for n in nodes]


def _candidates(report: Report) -> list[str]:
    """The notebook's own tensor first (``labels``, readable on the host while the loop's ``yb`` on a poisoned
    device is not), then the causes' variables, then what the failing line reads."""
    names: list[str] = [report.owner] if report.owner else []
    for cause in report.diagnosis.causes[:3]:
        names += [cause.variable] if cause.variable else []
        names += [ev.variable for ev in cause.evidence if ev.variable]
    frame = report.incident.user_frame
    if frame is not None and frame.line:
        names += _expressions_on(frame.line)
    return list(dict.fromkeys(names))


def involved_tensors(report: Report, limit: int = SHOWN) -> list[tuple[str, str]]:
    """``(expression, one-line summary)`` for each distinct tensor or array involved, at most ``limit``."""
    incident = report.incident
    workspace = build_workspace(incident)
    found: list[tuple[str, str]] = []
    seen: set[int] = set()
    for expression in _candidates(report):
        obj = workspace.resolve(expression)
        if obj is None or id(obj) in seen or not is_array_like(obj):
            continue
        seen.add(id(obj))
        try:
            found.append((expression, summarize(obj, incident.health.state).to_text()))
        except Exception as exc:  # an exotic tensor subclass must not cost the user the panel
            found.append((expression, f"(could not be summarised: {type(exc).__name__})"))
        if len(found) >= limit:
            break
    return found
