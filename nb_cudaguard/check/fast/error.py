"""The error a fired board becomes when the cell (or the checked block) ends, and what it owes the user.

Unlike the exact mode, the fast mode did not stop the op: it ran on safe values, and everything after it ran on
its results. So the error says so, lists the names the cell assigned or changed (from the cell's own AST,
``record.cellnames``), and gives the two ways on, as commands (``%cudaguard rerun --exact|--rebuild``; in a
notebook, as buttons under the error): re-run the cell under the exact mode, which stops the op before it runs and
shows every offending value; or fix the input and re-run the cells that build those names, with no restart, since no
kernel asserted and the CUDA context is healthy. Which cells those are is the replay planner's answer
(``replay.plan.rebuild_plan``), handed in by the session as ``rebuilds``: this package sits below the planner.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from traceback import FrameSummary
from types import ModuleType
from typing import Any

from nb_cudaguard.check.fast.board import Firing
from nb_cudaguard.check.fast.sites import Site
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.families import check_fix_of
from nb_cudaguard.record.cellnames import analyse

# The cells that build these names again, as (cell label, the names it builds), in the order they would run.
Rebuilds = Callable[[list[str]], list[tuple[str, list[str]]]]


@dataclass
class Consequences:
    """What a fired check means for the session: the names now wrong and the cells that build them."""

    changed: list[str] = field(default_factory=list)
    rebuild: list[tuple[str, list[str]]] = field(default_factory=list)  # (cell label, names it builds)


def consequences(source: str | None, rebuilds: Rebuilds | None, namespace: dict | None = None) -> Consequences:
    """``namespace`` tells modules apart: ``F.cross_entropy(...)`` calls a method of ``F`` but changes nothing."""
    if not source:
        return Consequences()
    names = analyse(source)
    modules = {n for n in names.call_mutated if isinstance((namespace or {}).get(n), ModuleType)}
    changed = sorted((names.defined | names.mutated | names.deleted) - names.imported - modules)
    return Consequences(changed, rebuilds(changed) if rebuilds is not None and changed else [])


class FastCheckError(CudaCheckError):
    """A fast check fired: the op ran on safe values, so the cell's results are wrong from that op on.

    A ``CudaCheckError`` (so a ``RuntimeError``), with ``changed_names`` (what the cell assigned or changed) and
    ``rebuild_cells`` (the cells that build those names, as ``(label, names)``), for the report and the panel, and
    ``frames``: the user's frames where the op ran, recorded then, since the error is raised when the cell ends.
    """

    _values_label = "first offending value"

    def __init__(
        self,
        *,
        consequences: Consequences,
        also: list[str],
        flat_position: bool,
        frames: list[FrameSummary] | None = None,
        value_known: bool = True,
        **fields: Any,
    ) -> None:
        self.value_known = value_known
        self.changed_names = consequences.changed
        self.rebuild_cells = consequences.rebuild
        self.also = also
        self.flat_position = flat_position
        self.frames = list(frames or [])
        super().__init__(**fields)

    def _values_text(self) -> str:
        where = _position_text(self.positions[0]) + (" (flat index)" if self.flat_position else "")
        if not self.value_known:
            return f"not known, at {where} (the tensor was changed in place before the cell ended)"
        return f"{self.values[0]!r} at {where}"

    def _outcome_lines(self) -> list[str]:
        lines = [
            "  nb_cudaguard (fast checks) ran this op on clamped values so that its kernel could not assert: "
            "the CUDA context is healthy, but this cell's results are wrong from this op on."
        ]
        lines.extend(f"  also fired: {text}" for text in self.also)
        if self.changed_names:
            lines.append(f"  names this cell assigned or changed, now wrong: {', '.join(self.changed_names)}")
        lines.append(f"  choices: {self._choices()} (no restart: no kernel asserted, the context is healthy)")
        return lines

    def _choices(self) -> str:
        exact = (
            "%cudaguard rerun --exact re-runs this cell under the exact checks (as %%cudacheck: they stop the op "
            "before it runs and list every offending value)"
        )
        if not self.rebuild_cells:
            return f"{exact}; or fix the input and run this cell again"
        cells = ", ".join(f"{label} ({', '.join(names)})" for label, names in self.rebuild_cells)
        return f"{exact}; or fix the input, then %cudaguard rerun --rebuild re-runs {cells}, then run this cell again"

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.update(mode="fast", changed_names=self.changed_names, rebuild_cells=[list(c) for c in self.rebuild_cells])
        return data


def error_from(firings: list[tuple[Firing, Site | None]], consequences: Consequences) -> FastCheckError:
    """The first firing becomes the error; the others (other devices) are mentioned."""
    (firing, site), rest = firings[0], firings[1:]
    also = [f"{s.op} ({s.argument}) on {f.device}" if s else f"a check on {f.device}" for f, s in rest]
    if site is None:  # a site number past the table's end: the board is all that is known
        return FastCheckError(
            consequences=consequences,
            also=also,
            flat_position=True,
            op="an assert-prone op",
            argument="?",
            family="other",
            problem=f"had {firing.count} invalid value(s)",
            values=[firing.value],
            positions=[(firing.flat_position,)],
            count=firing.count,
        )
    value = _shown(firing.value, site.kind) if firing.value_known else None
    family = site.family
    if family == "label_out_of_range" and isinstance(value, (int, float)) and value < 0:
        family = "negative_label"
    known_shape = site.shape is not None and not site.shape_varied
    position = _unravel(firing.flat_position, site.shape) if known_shape else (firing.flat_position,)
    return FastCheckError(
        consequences=consequences,
        also=also,
        flat_position=not known_shape,
        value_known=firing.value_known,
        op=site.op,
        argument=site.argument,
        family=family,
        problem=_problem(site, firing.count),
        values=[value],
        positions=[position],
        count=firing.count,
        valid_range=site.valid_range,
        range_source=site.range_source,
        variable=site.variable,
        user_line=site.user_line,
        via=site.via,
        frames=site.frames,
        fix=site.fix or check_fix_of(family),
    )


def narrowed(error: FastCheckError, namespace: dict | None) -> FastCheckError:
    """The error as the user's workspace explains it, before it is raised: the family narrowed within what the
    op's values allow and the variable named in the user's code where the check's is not one of theirs, by the
    rule the exact mode's report follows (``diagnosis.checked.combine``, reached through ``diagnose``). RoBERTa
    gathers its token-type buffer at the position ids: that gather's index past the buffer is a sequence longer
    than the position table, which the model's config shows. Runs once per fired cell, on a healthy context; the
    check's own finding stands if the workspace cannot be read."""
    if namespace is None:
        return error
    from nb_cudaguard.diagnosis import diagnose  # the diagnosis is needed only after a check fired
    from nb_cudaguard.incident.incident import build_incident

    try:
        cause = diagnose(build_incident(error, namespace=namespace)).causes[0]
    except Exception:
        return error
    if (cause.family, cause.variable) != (error.family, error.variable):
        error.family, error.variable, error.fix = cause.family, cause.variable, cause.fix
        error.args = (error._message(),)
    return error


def _problem(site: Site, count: int) -> str:
    if site.family == "nan_or_inf":
        return f"was cast to an integer index from a floating tensor holding {count} NaN/inf value(s)"
    return f"had {count} invalid value(s) (valid: {site.valid_range})"


def _shown(value: float, kind: str) -> Any:
    if kind == "bool":
        return bool(value)
    if kind == "int" and math.isfinite(value):
        return int(value)
    return value


def _unravel(flat: int, shape: tuple[int, ...] | None) -> tuple[int, ...]:
    position = []
    for size in reversed(shape or ()):
        position.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(position))


def _position_text(position: Any) -> str:
    return "[" + ", ".join(str(p) for p in position) + "]" if isinstance(position, (tuple, list)) else str(position)
