"""A report's content as HTML: the panel's body, and the ``text/html`` that nbconvert and static viewers show.

Colours come from JupyterLab's theme variables (with neutral fallbacks for VS Code, Colab and static pages), so
the report reads the same in light and dark themes; nothing sets a background that a theme cannot override. The
rules for ``pre`` and table cells name the class twice: as a ``text/html`` output (the panel's static twin, nbconvert)
the report sits in JupyterLab's ``.jp-RenderedHTMLCommon``, whose own rules for them are that specific.
Layout only: every sentence comes from ``panel.content``.
"""

from __future__ import annotations

from html import escape

from nb_cudaguard.panel.content import EVIDENCE_COLUMNS, CauseLine, EvidenceRow, ReportContent
from nb_cudaguard.panel.memory import MemoryFacts, human

STYLE = """<style>
.nbcg{font-family:var(--jp-ui-font-family,inherit);font-size:var(--jp-ui-font-size1,13px);
 color:var(--jp-ui-font-color1,inherit);line-height:1.45;max-width:980px}
.nbcg-head{border-left:4px solid var(--nbcg-accent);padding:2px 10px;margin-bottom:6px}
.nbcg-error{--nbcg-accent:var(--jp-error-color1,#d32f2f)}
.nbcg-ok{--nbcg-accent:var(--jp-success-color1,#388e3c)}
.nbcg-warn{--nbcg-accent:var(--jp-warn-color1,#ef6c00)}
.nbcg-info{--nbcg-accent:var(--jp-info-color1,#0288d1)}
.nbcg-title{font-weight:600;font-size:1.08em;color:var(--nbcg-accent)}
.nbcg-sub{color:var(--jp-ui-font-color2,inherit)}
.nbcg h4{margin:10px 0 3px 0;font-size:1em;font-weight:600;color:var(--jp-ui-font-color1,inherit)}
.nbcg code,.nbcg pre{font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,12px)}
.nbcg.nbcg pre{margin:2px 0;padding:4px 8px;white-space:pre-wrap;word-break:break-word;
 background:rgba(127,127,127,0.12);border-radius:3px}
.nbcg table{border-collapse:collapse;margin:3px 0 3px 0}
.nbcg.nbcg th,.nbcg.nbcg td{border:1px solid var(--jp-border-color2,rgba(127,127,127,0.4));padding:2px 6px;
 text-align:left;vertical-align:top}
.nbcg th{font-weight:600;background:rgba(127,127,127,0.12)}
.nbcg .nbcg-fix{border-left:3px solid var(--jp-success-color1,#388e3c);padding:2px 8px;margin:4px 0}
.nbcg .nbcg-dim{color:var(--jp-ui-font-color2,inherit)}
.nbcg ol,.nbcg ul{margin:2px 0;padding-left:22px}
.nbcg summary{cursor:pointer;margin-top:6px;color:var(--jp-ui-font-color2,inherit)}
</style>"""
_INFERRED = ' <span class="nbcg-dim">(inferred)</span>'


def to_html(content: ReportContent) -> str:
    verdict = content.verdict
    parts = [
        STYLE,
        '<div class="nbcg">',
        outcome_head(verdict.headline, verdict.tone, verdict.detail),
        f"<pre>{escape(content.error)}</pre>",
    ]
    if content.probe:
        parts.append(f'<div class="nbcg-dim">{escape(content.probe)}</div>')
    if content.assertions:
        parts.append("<h4>What the GPU checked</h4>")
        parts += [f"<div>{escape(a.meaning)}</div><pre>{escape(a.printed)}</pre>" for a in content.assertions]
    if content.memory is not None:
        parts.append(_memory_html(content.memory))
    elif content.causes:
        parts.append(_causes_html(content.causes))
    if content.user_line:
        parts.append(f"<h4>Your line</h4><pre>{escape(content.user_line)}</pre>")
    if content.tensors:
        items = "".join(f"<li><code>{escape(n)}</code>: {escape(s)}</li>" for n, s in content.tensors)
        parts.append(f"<h4>Tensors involved</h4><ul>{items}</ul>")
    parts += [f'<div class="nbcg-dim"><i>{escape(note)}</i></div>' for note in content.notes]
    if verdict.next_steps:
        parts.append(f"<h4>Next</h4><pre>{escape(chr(10).join(verdict.next_steps))}</pre>")
    parts.append("</div>")
    return "".join(parts)


_HEAD_TONES = {"ok": "nbcg-ok", "error": "nbcg-error", "warn": "nbcg-warn", "info": "nbcg-info"}


def outcome_head(headline: str, tone: str, detail: str = "") -> str:
    """The heading of a report: what it means for the session, in the tone's colour. Marked, so that the process
    after a restart can put the replay's outcome in its place (``panel.follower``)."""
    sub = f'<div class="nbcg-sub">{escape(detail)}</div>' if detail else ""
    return (
        f'<!--nbcg-head--><div class="nbcg-head {_HEAD_TONES.get(tone, "nbcg-info")}">'
        f'<div class="nbcg-title">nb_cudaguard: {escape(headline)}</div>{sub}</div><!--/nbcg-head-->'
    )


def _causes_html(causes: tuple[CauseLine, ...]) -> str:
    parts = ["<h4>Likely cause</h4>", _cause_html(causes[0])]
    if len(causes) > 1:
        others = "".join(f"<li>{_cause_html(c)}</li>" for c in causes[1:])
        parts.append(f"<details><summary>{len(causes) - 1} less likely cause(s)</summary><ol>{others}</ol></details>")
    return "".join(parts)


def _cause_html(cause: CauseLine) -> str:
    who = f" in <code>{escape(cause.variable)}</code>" if cause.variable else ""
    return (
        f"<b>{escape(cause.title)}</b>{who} "
        f'<span class="nbcg-dim" title="cause family, for tools and issues">({escape(cause.tag)})</span>'
        f"{'' if cause.summary.lower() == cause.title.lower() else ': ' + escape(cause.summary)}"
        f"{_evidence_table(cause.evidence) if cause.evidence else ''}"
        f'<div class="nbcg-fix"><b>Fix:</b> {escape(cause.fix)}</div>'
    )


def _evidence_table(rows: tuple[EvidenceRow, ...]) -> str:
    used = [c for c in EVIDENCE_COLUMNS if any(row.columns[c] for row in rows)]
    head = "".join(f"<th>{h}</th>" for h in ("evidence", *used))
    body = "".join(
        f"<tr><td>{escape(row.text)}{_INFERRED if row.inferred else ''}</td>"
        + "".join(f"<td>{escape(row.columns[c])}</td>" for c in used)
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _memory_html(memory: MemoryFacts) -> str:
    parts = ["<h4>Memory</h4>", *(f"<div>{escape(line)}</div>" for line in memory.summary_lines())]
    if memory.holders:
        rows = "".join(
            f"<tr><td><code>{escape(h.name)}</code></td><td>{human(h.nbytes)}</td><td>{escape(h.device)}</td>"
            f"<td>{escape(h.what)}</td></tr>"
            for h in memory.holders
        )
        parts.append(
            "<h4>Biggest holders in the namespace</h4><table><tr><th>name</th><th>size</th><th>device</th>"
            f"<th>what</th></tr>{rows}</table>"
        )
    else:
        parts.append('<div class="nbcg-dim">No tensors found in the namespace.</div>')
    steps = "\n".join(memory.how_to_free())
    parts.append(f"<h4>How to free it</h4><pre>{escape(steps)}</pre>")
    return "".join(parts)
