"""Everything an analyser may look at for one incident, with the safe, cached ways to read tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.static import CallSite, LineFacts, StaticFacts
from nb_cudaguard.diagnosis.evidence.workspace import Named, Workspace
from nb_cudaguard.diagnosis.tensors import OutOfRange, TensorSummary, is_array_like, outside, readable, summarize
from nb_cudaguard.families import summary_of
from nb_cudaguard.incident.incident import Incident


@dataclass
class Context:
    incident: Incident
    workspace: Workspace
    static: StaticFacts
    line: LineFacts
    expected_groups: frozenset[str] = frozenset()  # what the error text and traceback point at, before any value
    _summaries: dict[int, TensorSummary] = field(default_factory=dict, repr=False)

    @property
    def health(self) -> str:
        return self.incident.health.state

    @property
    def source_line(self) -> str | None:
        frame = self.incident.user_frame
        return f"{frame.where}: {frame.line}" if frame is not None and frame.line else None

    # --- reading, bounded and safe
    def summary(self, obj: object) -> TensorSummary:
        key = id(obj)
        if key not in self._summaries:
            self._summaries[key] = summarize(obj, self.health)
        return self._summaries[key]

    def readable(self, obj: object) -> bool:
        return readable(obj, self.health)[0]

    def outside(self, obj: object, low, high, **kwargs) -> OutOfRange | None:
        return outside(obj, low, high, health_state=self.health, **kwargs)

    # --- names
    def tensor(self, expression: str | None) -> Named | None:
        """The tensor an expression in the failing line refers to, named as the user knows it."""
        if not expression:
            return None
        obj = self.workspace.resolve(expression)
        if not is_array_like(obj):
            return None
        return Named(self.workspace.name_of(obj) or expression, obj)

    def value(self, expression: str | None) -> object | None:
        return self.workspace.resolve(expression) if expression else None

    def call_target(self, call: CallSite) -> object | None:
        """What the failing line calls (a loss module, a model, an embedding), when it is reachable."""
        expression = f"{call.receiver}.{call.name}" if call.receiver else call.name
        return self.workspace.resolve(expression)

    # --- building causes
    def tensor_evidence(self, named: Named, text: str, **kwargs) -> Evidence:
        summary = self.summary(named.obj)
        direct = kwargs.pop("direct", summary.readable)
        return Evidence(
            kind="tensor",
            text=f"{named.name}: {summary.to_text()}; {text}",
            direct=direct,
            variable=named.name,
            source_line=self.source_line,
            **kwargs,
        )

    def cause(self, family: str, confidence: float, variable: str | None, fix: str, evidence: list[Evidence]) -> Cause:
        return Cause(
            family=family,
            confidence=confidence,
            summary=summary_of(family),
            fix=fix,
            evidence=evidence,
            variable=variable,
        )


def range_evidence(ctx: Context, named: Named, found: OutOfRange, valid: str, source: str, why: str) -> Evidence:
    return ctx.tensor_evidence(
        named,
        f"{found.count} value(s) outside {valid} ({source}): {found.describe(named.name)}; {why}",
        values=found.values,
        positions=[list(p) for p in found.positions],
        count=found.count,
        valid_range=valid,
        range_source=source,
    )
