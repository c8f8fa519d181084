"""The report: an Incident and its Diagnosis as text, Markdown, HTML and JSON. It renders; it decides nothing.

The three human formats are layouts of one ``ReportContent`` (``panel.content``), which the panel extends with the
tensors involved and, after an out-of-memory error, what holds the memory. The JSON is a public format read by
``nb-cudaguard run`` and by users' scripts: its keys do not change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.panel import render_html, render_text
from nb_cudaguard.panel.content import ReportContent, build


def text_bundle(content: ReportContent) -> dict[str, str]:
    """The display formats of one content, each rendered once."""
    return {
        "text/plain": render_text.to_text(content),
        "text/markdown": render_text.to_markdown(content),
        "text/html": render_html.to_html(content),
    }


@dataclass
class Report:
    incident: Incident
    diagnosis: Diagnosis

    def content(self) -> ReportContent:
        return build(self.incident, self.diagnosis)

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
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        return {**text_bundle(self.content()), "application/json": json.loads(self.to_json())}

    def __repr__(self) -> str:
        return self.to_text()
