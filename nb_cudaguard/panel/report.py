"""The report: an Incident and its Diagnosis as text, Markdown, HTML and JSON. It renders; it decides nothing.

The three human formats are layouts of one ``ReportContent`` (``panel.content``), which the panel extends with the
tensors involved and, after an out-of-memory error, what holds the memory. The JSON is a public format read by
``nb-cudaguard run`` and by users' scripts: its keys do not change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.panel import render_html, render_text
from nb_cudaguard.panel.content import ReportContent, build
from nb_cudaguard.panel.memory import MemoryFacts
from nb_cudaguard.panel.owner import owner_of


def text_bundle(content: ReportContent) -> dict[str, str]:
    """The display formats of one content, each rendered once."""
    return {
        "text/plain": render_text.to_text(content),
        "text/markdown": render_text.to_markdown(content),
        "text/html": render_html.to_html(content),
    }


@dataclass
class Report:
    """One incident and its diagnosis; where it stands to other reports, when it is not a failure of its own.

    ``origin``: this cell died of the sticky error of a context an earlier cell poisoned; its causes are that
    cell's, and the report says so. ``restarted``: the report crossed a restart (``SessionState.report``): the
    incident happened in the process before, the context has been fresh since. ``pinned``: the failing cell was
    re-run under ``%%cudacheck`` after the restart, and the diagnosis is what the check read, which replaces the
    ranking the failure alone allowed. ``owner``: the notebook's own name for the values the top cause is about
    (``panel.owner``), read once while the failing process's namespace is alive and kept across a restart.
    """

    incident: Incident
    diagnosis: Diagnosis
    origin: Report | None = None
    restarted: bool = False
    pinned: str | None = None  # how the causes were pinned, said in the report
    owner: str | None = None

    def __post_init__(self) -> None:
        if self.owner is None and self.incident.namespace is not None:
            try:
                self.owner = owner_of(self.incident, self.diagnosis.top)
            except Exception:  # an exotic namespace must not cost the user the report: the line's name stands
                self.owner = None

    def content(self, tensors: list[tuple[str, str]] | None = None, memory: MemoryFacts | None = None) -> ReportContent:
        content = build(self.incident, self.diagnosis, tensors, memory, self.owner)
        verdict = content.verdict
        if self.origin is not None:
            first = self.origin.incident.cell
            where = f"cell {first.label}" if first is not None else "an earlier cell"
            verdict = replace(
                verdict,
                detail=f"This cell failed because {where} had already poisoned the context: the cause below is that "
                f"cell's failure, and a restart rebuilds what {where} reads. {verdict.detail}",
            )
        if self.restarted:
            verdict = replace(
                verdict,
                tone="info",
                headline=f"Before the restart: {verdict.headline}",
                detail="The kernel has been restarted since: its context is new. This is the report of the failure "
                "that made the restart necessary.",
                next_steps=(),
            )
        notes = content.notes if self.pinned is None else (self.pinned, *content.notes)
        return replace(content, verdict=verdict, notes=notes)

    def to_text(self) -> str:
        return render_text.to_text(self.content())

    def to_markdown(self) -> str:
        return render_text.to_markdown(self.content())

    def to_html(self) -> str:
        return render_html.to_html(self.content())

    def to_dict(self) -> dict[str, Any]:
        return {
            "poisoned": self.incident.poisoned,
            "classification": self.incident.classification,
            "causes": self.diagnosis.to_dict()["causes"],
            "notes": self.diagnosis.notes,
            "assertions": [a.to_dict() for a in self.incident.assertions],
            "incident": self.incident.to_dict(),
            "first_failure": self.origin.to_dict() if self.origin is not None else None,
            "restarted": self.restarted,
            "pinned": self.pinned,
            "owner": self.owner,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """The report as ``to_dict`` wrote it, without the live objects (exception, frame locals, namespace) that
        only the process of the failure had: what a report needs to render, and all that a restart can carry."""
        origin = data.get("first_failure")
        return cls(
            Incident.from_dict(data["incident"]),
            Diagnosis.from_dict({"causes": data.get("causes", []), "notes": data.get("notes", [])}),
            origin=cls.from_dict(origin) if origin else None,
            restarted=bool(data.get("restarted", False)),
            pinned=data.get("pinned"),
            owner=data.get("owner"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {**text_bundle(self.content()), "application/json": json.loads(self.to_json())}

    def __repr__(self) -> str:
        return self.to_text()
