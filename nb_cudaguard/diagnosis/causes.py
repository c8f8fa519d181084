"""The diagnosis's vocabulary: a Cause with its Evidence, ranked in a Diagnosis. Plain data that renders itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nb_cudaguard.errors import CudaCheckError


@dataclass
class Evidence:
    """One fact behind a cause. ``direct``: read from a value or the printed assertion; otherwise inferred."""

    kind: str  # assertion | error_text | tensor | module | config | tokenizer | source | journal | guard
    text: str
    direct: bool = True
    variable: str | None = None
    values: list | None = None
    positions: list | None = None
    count: int | None = None
    valid_range: str | None = None
    range_source: str | None = None
    source_line: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> Evidence:
        return cls(**data)

    def to_text(self) -> str:
        how = "" if self.direct else " (inferred)"
        return f"{self.text}{how}"


@dataclass
class Cause:
    family: str
    confidence: float
    summary: str
    fix: str
    evidence: list[Evidence] = field(default_factory=list)
    variable: str | None = None

    def to_dict(self) -> dict:
        return {
            "family": self.family,
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "variable": self.variable,
            "evidence": [e.to_dict() for e in self.evidence],
            "fix": self.fix,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Cause:
        return cls(
            family=str(data["family"]),
            confidence=float(data["confidence"]),
            summary=str(data["summary"]),
            fix=str(data["fix"]),
            evidence=[Evidence.from_dict(e) for e in data.get("evidence", [])],
            variable=data.get("variable"),
        )


@dataclass
class Diagnosis:
    """``alternatives``: the families (the top cause's first) that nothing read tells apart, which the report
    states as one answer with the step that decides; empty when the evidence chose the family."""

    causes: list[Cause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    def to_dict(self) -> dict:
        return {
            "causes": [c.to_dict() for c in self.causes],
            "notes": list(self.notes),
            "alternatives": list(self.alternatives),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Diagnosis:
        return cls(
            [Cause.from_dict(c) for c in data.get("causes", [])],
            [str(n) for n in data.get("notes", [])],
            [str(f) for f in data.get("alternatives", [])],
        )


def cause_from_check(error: CudaCheckError) -> Cause:
    """What ``%%cudacheck`` found when it stopped an op, as a Cause: certain (confidence 1.0), since the check read
    the very values the op received, and backed by that one piece of direct evidence."""
    evidence = Evidence(
        kind="guard",
        text=f"%%cudacheck: {error.op} argument {error.subject} {error.problem}",
        direct=True,
        variable=error.variable,
        values=error.values or None,
        positions=error.positions or None,
        count=error.count,
        valid_range=error.valid_range,
        range_source=error.range_source,
        source_line=error.user_line,
    )
    return Cause(
        family=error.family,
        confidence=1.0,
        summary=f"{error.op}: {error.subject} {error.problem}",
        fix=error.fix,
        evidence=[evidence],
        variable=error.variable,
    )
