"""The report: an Incident and its Diagnosis as text, Markdown, HTML and JSON. It renders; it decides nothing."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.incident import Incident

_HEADLINE = {
    "poisoned": "CUDA context POISONED: every later CUDA call in this process will fail. Restart the kernel "
    "(%cudaguard restart replays your setup cells).",
    "recoverable": "CUDA error, but the context still works: no restart needed.",
    "not_cuda": "Error in a tensor op (not a CUDA failure): no restart needed.",
}
_NEXT = {
    "poisoned": [
        "%cudaguard restart          restart in place and replay the cells that built your state",
        "%cudaguard restart --diagnose   ... then re-run the failing cell under %%cudacheck",
        "%%cudacheck                 at the top of the failing cell, once restarted, to pin the op",
    ],
    "recoverable": ["%%cudacheck                 at the top of the failing cell to check each op's inputs"],
    "not_cuda": [],
}


@dataclass
class Report:
    incident: Incident
    diagnosis: Diagnosis

    # --- the pieces every format shares
    def _assertion_lines(self) -> list[tuple[str, str]]:
        rows = []
        for record in self.incident.assertions:
            entry = catalog.lookup_assertion(record)
            rows.append((record.to_text(), entry.cause if entry else "an assertion this catalog does not know"))
        return rows

    def _user_line(self) -> str | None:
        frame = self.incident.user_frame
        if frame is None:
            return None
        return f"{frame.where}: {frame.line}" if frame.line else frame.where

    # --- formats
    def to_text(self) -> str:
        inc = self.incident
        out = [f"nb_cudaguard: {_HEADLINE[inc.classification]}", f"  {inc.exc_type}: {inc.message.splitlines()[0]}"]
        if inc.health.state != "unknown":
            out.append(f"  probe ({inc.health.source}): {inc.health.detail}")
        rows = self._assertion_lines()
        if rows:
            out.append("Device assertion (printed by the GPU on the process's stderr):")
            for line, meaning in rows:
                out.append(f"  {line}")
                out.append(f"    = {meaning}")
        if self.diagnosis.causes:
            out.append("Likely cause:")
            for rank, cause in enumerate(self.diagnosis.causes[:3], 1):
                who = f" [{cause.variable}]" if cause.variable else ""
                out.append(f"  {rank}. {cause.family}{who} ({cause.confidence:.0%}): {cause.summary}")
                for ev in cause.evidence[:4]:
                    out.append(f"     - {ev.to_text()}")
                out.append(f"     fix: {cause.fix}")
        user_line = self._user_line()
        if user_line:
            out.append(f"Your line: {user_line}")
        out.extend(f"Note: {note}" for note in self.diagnosis.notes)
        steps = _NEXT[inc.classification]
        if steps:
            out.append("Next:")
            out.extend(f"  {step}" for step in steps)
        return "\n".join(out)

    def to_markdown(self) -> str:
        inc = self.incident
        out = [f"### nb_cudaguard: {inc.classification}", "", _HEADLINE[inc.classification], ""]
        out += ["```", f"{inc.exc_type}: {inc.message.strip()}", "```", ""]
        rows = self._assertion_lines()
        if rows:
            out.append("**Device assertion**")
            out.append("")
            for line, meaning in rows:
                out.append(f"- `{line}`: {meaning}")
            out.append("")
        if self.diagnosis.causes:
            out += ["| rank | family | confidence | cause | fix |", "|---|---|---|---|---|"]
            for rank, cause in enumerate(self.diagnosis.causes[:5], 1):
                row = [str(rank), f"`{cause.family}`", f"{cause.confidence:.0%}", cause.summary, cause.fix]
                out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) + " |")
            out.append("")
            top = self.diagnosis.causes[0]
            if top.evidence:
                out.append("**Evidence**")
                out.append("")
                out.extend(f"- {ev.to_text()}" for ev in top.evidence)
                out.append("")
        user_line = self._user_line()
        if user_line:
            out += [f"**Your line:** `{user_line}`", ""]
        out.extend(f"> {note}" for note in self.diagnosis.notes)
        return "\n".join(out).rstrip() + "\n"

    def to_html(self) -> str:
        inc = self.incident
        first_line = inc.message.splitlines()[0] if inc.message else ""
        colour = {"poisoned": "#b00020", "recoverable": "#8a6d00", "not_cuda": "#555"}[inc.classification]
        parts = [
            '<div class="nb-cudaguard-report" style="border-left:4px solid ' + colour + ';padding:4px 10px">',
            f"<b style='color:{colour}'>nb_cudaguard: {html.escape(_HEADLINE[inc.classification])}</b>",
            f"<pre>{html.escape(inc.exc_type)}: {html.escape(first_line)}</pre>",
        ]
        rows = self._assertion_lines()
        if rows:
            parts.append("<b>Device assertion</b><ul>")
            parts += [f"<li><code>{html.escape(a)}</code><br>{html.escape(m)}</li>" for a, m in rows]
            parts.append("</ul>")
        if self.diagnosis.causes:
            parts.append("<b>Likely cause</b><ol>")
            for cause in self.diagnosis.causes[:3]:
                evidence = "".join(f"<li>{html.escape(e.to_text())}</li>" for e in cause.evidence[:4])
                parts.append(
                    f"<li><code>{cause.family}</code> ({cause.confidence:.0%}): {html.escape(cause.summary)}"
                    f"<ul>{evidence}</ul><i>Fix:</i> {html.escape(cause.fix)}</li>"
                )
            parts.append("</ol>")
        user_line = self._user_line()
        if user_line:
            parts.append(f"<b>Your line:</b> <code>{html.escape(user_line)}</code>")
        parts += [f"<p><i>{html.escape(n)}</i></p>" for n in self.diagnosis.notes]
        parts.append("</div>")
        return "\n".join(parts)

    def to_dict(self) -> dict:
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

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {
            "text/plain": self.to_text(),
            "text/markdown": self.to_markdown(),
            "text/html": self.to_html(),
            "application/json": json.loads(self.to_json()),
        }

    def __repr__(self) -> str:
        return self.to_text()
