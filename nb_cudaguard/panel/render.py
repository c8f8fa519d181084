"""The panel's content as HTML, text and Markdown: the same facts inside the widget and in the display bundle that
terminal IPython, nbconvert and static viewers show instead.

Colours come from JupyterLab's theme variables (with neutral fallbacks for VS Code, Colab and static pages), so
the panel reads the same in light and dark themes; nothing sets a background that a theme cannot override.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from nb_cudaguard.incident import catalog
from nb_cudaguard.panel.memory import MemoryFacts, human
from nb_cudaguard.panel.report import Report

CAUSES_SHOWN = 3

HEADLINES = {
    "poisoned": (
        "error",
        "The GPU stopped on a device-side assert: this kernel's CUDA context is poisoned. Restart needed.",
        "Every later CUDA call in this process fails with the same error. Restart & replay rebuilds your variables "
        "in a fresh process, on the same kernel.",
    ),
    "recoverable": (
        "warn",
        "CUDA error, but the context still works: no restart needed.",
        "Fix the input below and run the cell again.",
    ),
    "not_cuda": (
        "info",
        "A tensor op rejected its input (not a CUDA failure): no restart needed.",
        "Fix the input below and run the cell again.",
    ),
    "out_of_memory": (
        "warn",
        "Out of GPU memory: recoverable, no restart needed.",
        "Free what the namespace holds (below), then run the cell again.",
    ),
}

STYLE = """<style>
.nbcg{font-family:var(--jp-ui-font-family,inherit);font-size:var(--jp-ui-font-size1,13px);
 color:var(--jp-ui-font-color1,inherit);line-height:1.45;max-width:980px}
.nbcg-head{border-left:4px solid var(--nbcg-accent);padding:2px 10px;margin-bottom:6px}
.nbcg-error{--nbcg-accent:var(--jp-error-color1,#d32f2f)}
.nbcg-warn{--nbcg-accent:var(--jp-warn-color1,#ef6c00)}
.nbcg-info{--nbcg-accent:var(--jp-info-color1,#0288d1)}
.nbcg-title{font-weight:600;font-size:1.08em;color:var(--nbcg-accent)}
.nbcg-sub{color:var(--jp-ui-font-color2,inherit)}
.nbcg h4{margin:10px 0 3px 0;font-size:1em;font-weight:600;color:var(--jp-ui-font-color1,inherit)}
.nbcg code,.nbcg pre{font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,12px)}
.nbcg pre{margin:2px 0;padding:4px 8px;white-space:pre-wrap;word-break:break-word;
 background:rgba(127,127,127,0.12);border-radius:3px}
.nbcg table{border-collapse:collapse;margin:3px 0 3px 0}
.nbcg th,.nbcg td{border:1px solid var(--jp-border-color2,rgba(127,127,127,0.4));padding:2px 6px;text-align:left;
 vertical-align:top}
.nbcg th{font-weight:600;background:rgba(127,127,127,0.12)}
.nbcg .nbcg-fix{border-left:3px solid var(--jp-success-color1,#388e3c);padding:2px 8px;margin:4px 0}
.nbcg .nbcg-dim{color:var(--jp-ui-font-color2,inherit)}
.nbcg ol,.nbcg ul{margin:2px 0;padding-left:22px}
.nbcg summary{cursor:pointer;margin-top:6px;color:var(--jp-ui-font-color2,inherit)}
</style>"""


@dataclass
class PanelFacts:
    """What the panel shows beyond the Report: gathered once, rendered in every format."""

    report: Report
    kind: str  # a HEADLINES key
    tensors: list[tuple[str, str]] = field(default_factory=list)
    memory: MemoryFacts | None = None

    @property
    def headline(self) -> tuple[str, str, str]:
        return HEADLINES[self.kind]


def _assertions(report: Report) -> list[tuple[str, str]]:
    rows = []
    for record in report.incident.assertions:
        entry = catalog.lookup_assertion(record)
        meaning = entry.cause if entry else "An assertion this catalog does not know: see the condition."
        rows.append((meaning, record.to_text()))
    return rows


def _user_line(report: Report) -> str | None:
    frame = report.incident.user_frame
    if frame is None:
        return None
    return f"{frame.where}: {frame.line}" if frame.line else frame.where


_COLUMNS = ("variable", "values", "valid range", "range from")


def _evidence_rows(cause, shown_elsewhere: set[str]) -> list[tuple[str, dict[str, str]]]:
    """Evidence as (text, column values); what the panel already says above (the assertion) is left out."""
    rows = []
    for ev in cause.evidence:
        if ev.text in shown_elsewhere:
            continue
        values = ", ".join(str(v) for v in ev.values[:8]) if ev.values else ""
        if ev.count and ev.values and ev.count > len(ev.values[:8]):
            values += f" ({ev.count} in all)"
        text = escape(ev.text) + ("" if ev.direct else ' <span class="nbcg-dim">(inferred)</span>')
        cells = (ev.variable or "", values, ev.valid_range or "", ev.range_source or "")
        columns = dict(zip(_COLUMNS, cells, strict=True))
        rows.append((text, columns))
    return rows


def _evidence_table(rows: list[tuple[str, dict[str, str]]]) -> str:
    used = [c for c in _COLUMNS if any(columns[c] for _, columns in rows)]
    head = "".join(f"<th>{h}</th>" for h in ("evidence", *used))
    body = "".join(
        f"<tr><td>{text}</td>" + "".join(f"<td>{escape(columns[c])}</td>" for c in used) + "</tr>"
        for text, columns in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cause_html(cause, shown_elsewhere: set[str]) -> str:
    who = f" in <code>{escape(cause.variable)}</code>" if cause.variable else ""
    rows = _evidence_rows(cause, shown_elsewhere)
    return (
        f"<b><code>{escape(cause.family)}</code></b>{who} "
        f'<span class="nbcg-dim">({cause.confidence:.0%})</span>: {escape(cause.summary)}'
        f"{_evidence_table(rows) if rows else ''}"
        f'<div class="nbcg-fix"><b>Fix:</b> {escape(cause.fix)}</div>'
    )


def _causes_html(report: Report) -> str:
    causes = report.diagnosis.causes[:CAUSES_SHOWN]
    if not causes:
        return ""
    shown = {meaning for meaning, _ in _assertions(report)}
    parts = ["<h4>Likely cause</h4>", _cause_html(causes[0], shown)]
    if len(causes) > 1:
        others = "".join(f"<li>{_cause_html(c, shown)}</li>" for c in causes[1:])
        parts.append(f"<details><summary>{len(causes) - 1} less likely cause(s)</summary><ol>{others}</ol></details>")
    return "".join(parts)


def _memory_html(facts: MemoryFacts) -> str:
    parts = ["<h4>Memory</h4>", *(f"<div>{escape(line)}</div>" for line in facts.summary_lines())]
    if facts.holders:
        rows = "".join(
            f"<tr><td><code>{escape(h.name)}</code></td><td>{human(h.nbytes)}</td><td>{escape(h.device)}</td>"
            f"<td>{escape(h.what)}</td></tr>"
            for h in facts.holders
        )
        parts.append(
            "<h4>Biggest holders in the namespace</h4><table><tr><th>name</th><th>size</th><th>device</th>"
            f"<th>what</th></tr>{rows}</table>"
        )
    else:
        parts.append('<div class="nbcg-dim">No tensors found in the namespace.</div>')
    steps = "\n".join(facts.how_to_free())
    parts.append(f"<h4>How to free it</h4><pre>{escape(steps)}</pre>")
    return "".join(parts)


def to_html(facts: PanelFacts) -> str:
    report, inc = facts.report, facts.report.incident
    tone, title, sub = facts.headline
    first = inc.message.strip().splitlines()[0] if inc.message.strip() else ""
    parts = [
        STYLE,
        f'<div class="nbcg nbcg-{tone}"><div class="nbcg-head">',
        f'<div class="nbcg-title">nb_cudaguard: {escape(title)}</div>',
        f'<div class="nbcg-sub">{escape(sub)}</div></div>',
        f"<pre>{escape(inc.exc_type)}: {escape(first)}</pre>",
    ]
    rows = _assertions(report)
    if rows:
        parts.append("<h4>What the GPU checked</h4>")
        parts += [f"<div>{escape(m)}</div><pre>{escape(line)}</pre>" for m, line in rows]
    if facts.memory is not None:
        parts.append(_memory_html(facts.memory))
    else:
        parts.append(_causes_html(report))
    user_line = _user_line(report)
    if user_line:
        parts.append(f"<h4>Your line</h4><pre>{escape(user_line)}</pre>")
    if facts.tensors:
        items = "".join(f"<li><code>{escape(n)}</code>: {escape(s)}</li>" for n, s in facts.tensors)
        parts.append(f"<h4>Tensors involved</h4><ul>{items}</ul>")
    parts += [f'<div class="nbcg-dim"><i>{escape(note)}</i></div>' for note in report.diagnosis.notes]
    parts.append("</div>")
    return "".join(parts)


def to_text(facts: PanelFacts) -> str:
    if facts.memory is None:
        out = [facts.report.to_text()]
    else:
        inc = facts.report.incident
        out = [f"nb_cudaguard: {facts.headline[1]}", f"  {inc.exc_type}: {inc.message.strip().splitlines()[0]}"]
        out += ["Memory:", *(f"  {line}" for line in facts.memory.summary_lines())]
        out += ["Biggest holders in the namespace:", *(f"  {h.to_text()}" for h in facts.memory.holders)]
        out += ["How to free it:", *(f"  {step}" for step in facts.memory.how_to_free())]
    if facts.tensors:
        out += ["Tensors involved:", *(f"  {name}: {summary}" for name, summary in facts.tensors)]
    return "\n".join(out)


def to_markdown(facts: PanelFacts) -> str:
    out = [facts.report.to_markdown().rstrip()] if facts.memory is None else [f"### nb_cudaguard: {facts.headline[1]}"]
    if facts.memory is not None:
        inc = facts.report.incident
        out += ["", "```", f"{inc.exc_type}: {inc.message.strip()}", "```", "", "**Memory**", ""]
        out += [f"- {line}" for line in facts.memory.summary_lines()]
        if facts.memory.holders:
            out += ["", "| name | size | device | what |", "|---|---|---|---|"]
            out += [f"| `{h.name}` | {human(h.nbytes)} | {h.device} | {h.what} |" for h in facts.memory.holders]
        out += ["", "**How to free it**", "", "```python", *facts.memory.how_to_free(), "```"]
    if facts.tensors:
        out += ["", "**Tensors involved**", ""]
        out += [f"- `{name}`: {summary}" for name, summary in facts.tensors]
    return "\n".join(out).rstrip() + "\n"
