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
    """``answers``: the report's answers in order, each the families it states as one. A family that evidence
    chose is an answer alone; the families of a group that only the prior ranks (nothing read tells them apart)
    are one answer, said in one line with the step that decides. Empty for a report of no cause."""

    causes: list[Cause] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    answers: list[list[str]] = field(default_factory=list)

    @property
    def top(self) -> Cause | None:
        return self.causes[0] if self.causes else None

    @property
    def alternatives(self) -> list[str]:
        """The first answer's families where it holds more than one (the top cause's first); empty where the
        evidence chose the family."""
        return list(self.answers[0]) if self.answers and len(self.answers[0]) > 1 else []

    def to_dict(self) -> dict:
        return {
            "causes": [c.to_dict() for c in self.causes],
            "notes": list(self.notes),
            "answers": [list(a) for a in self.answers],
            "alternatives": self.alternatives,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Diagnosis:
        causes = [Cause.from_dict(c) for c in data.get("causes", [])]
        if "answers" in data:
            answers = [[str(f) for f in answer] for answer in data["answers"]]
        else:  # a report written before the answers were kept: the alternatives, then each other cause
            first = [str(f) for f in data.get("alternatives", [])]
            answers = ([first] if first else []) + [[c.family] for c in causes if c.family not in first]
        return cls(causes, [str(n) for n in data.get("notes", [])], answers)


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
