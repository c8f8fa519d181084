"""A report's content as HTML: the panel's body, and the ``text/html`` that nbconvert and static viewers show.

Colours come from JupyterLab's theme variables (with neutral fallbacks for VS Code, Colab and static pages), so
the report reads the same in light and dark themes; nothing sets a background that a theme cannot override. The
rules for ``pre`` and table cells name the class twice: as a ``text/html`` output (the panel's static twin, nbconvert)
the report sits in JupyterLab's ``.jp-RenderedHTMLCommon``, whose own rules for them are that specific.
Layout only: every sentence comes from ``panel.content``.
"""

from __future__ import annotations

import re
from html import escape

from nb_cudaguard.panel.content import ReportContent
from nb_cudaguard.panel.headline import CauseLine, EvidenceRow
from nb_cudaguard.panel.memory import MemoryFacts, human
from nb_cudaguard.panel.render_text import split_step

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
.nbcg-lead{border-left:4px solid var(--nbcg-accent);padding:2px 10px;margin-bottom:6px}
.nbcg-problem{font-weight:600;font-size:1.08em}
.nbcg-next{margin-top:2px}
</style>"""
_INFERRED = ' <span class="nbcg-dim">(inferred)</span>'
_CODE = re.compile(r"`([^`]+)`")


def to_html(content: ReportContent) -> str:
    verdict, headline = content.verdict, content.headline
    parts = [STYLE, '<div class="nbcg">']
    if headline is not None:
        parts.append(
            f'<div class="nbcg-lead {_HEAD_TONES.get(verdict.tone, "nbcg-info")}">'
            f'<div class="nbcg-problem">{code_spans(headline.problem)}</div>'
            f'<div class="nbcg-fix"><b>Fix:</b> {code_spans(headline.fix)}</div></div>'
        )
    parts.append(outcome_head(verdict.headline, verdict.tone, verdict.detail, _next_html(verdict.next_steps[:1])))
    parts.append(f"<pre>{escape(content.error)}</pre>")
    if content.probe:
        parts.append(f'<div class="nbcg-dim">{escape(content.probe)}</div>')
    if content.user_line:
        parts.append(f"<h4>Your line</h4><pre>{escape(content.user_line)}</pre>")
    if content.memory is not None:
        parts.append(_memory_html(content.memory))
    elif content.causes:
        parts.append(_causes_html(content.causes, with_fix=headline is None))
    if content.assertions:
        said = "".join(f"<div>{escape(a.meaning)}</div><pre>{escape(a.printed)}</pre>" for a in content.assertions)
        parts.append(_folded("What the GPU checked", said))
    if content.tensors:
        items = "".join(f"<li><code>{escape(n)}</code>: {escape(s)}</li>" for n, s in content.tensors)
        parts.append(_folded(f"Tensors involved ({len(content.tensors)})", f"<ul>{items}</ul>"))
    if content.notes:
        notes = "".join(f"<li>{code_spans(note)}</li>" for note in content.notes)
        parts.append(_folded(f"Notes ({len(content.notes)})", f"<ul>{notes}</ul>"))
    if len(verdict.next_steps) > 1:
        parts.append(_folded("Other steps", f"<pre>{escape(chr(10).join(verdict.next_steps[1:]))}</pre>"))
    parts.append("</div>")
    return "".join(parts)


def code_spans(text: str) -> str:
    """Escaped text whose backticked spans are code."""
    return _CODE.sub(r"<code>\1</code>", escape(text))


def _folded(summary: str, body: str) -> str:
    return f"<details><summary>{summary}</summary>{body}</details>"


def _next_html(steps: tuple[str, ...]) -> str:
    if not steps:
        return ""
    code, words = split_step(steps[0])
    return f"<b>Next:</b> <code>{escape(code)}</code>" + (f" {escape(words)}" if words else "")


_HEAD_TONES = {"ok": "nbcg-ok", "error": "nbcg-error", "warn": "nbcg-warn", "info": "nbcg-info"}


def outcome_head(headline: str, tone: str, detail: str = "", next_html: str = "") -> str:
    """The heading of a report: what it means for the session, in the tone's colour, and the step to take.
    Marked, so that the process after a restart can put the replay's outcome in its place (``panel.follower``)."""
    sub = f'<div class="nbcg-sub">{escape(detail)}</div>' if detail else ""
    step = f'<div class="nbcg-next">{next_html}</div>' if next_html else ""
    return (
        f'<!--nbcg-head--><div class="nbcg-head {_HEAD_TONES.get(tone, "nbcg-info")}">'
        f'<div class="nbcg-title">nb_cudaguard: {escape(headline)}</div>{sub}{step}</div><!--/nbcg-head-->'
    )


def _causes_html(causes: tuple[CauseLine, ...], with_fix: bool) -> str:
    top = causes[0]
    parts = [_folded(f"Why: {_cause_title(top)}", _evidence_list(top.evidence, top.fix if with_fix else ""))]
    if len(causes) > 1:
        others = "".join(f"<li>{_cause_title(c)}{_evidence_list(c.evidence, c.fix)}</li>" for c in causes[1:])
        parts.append(_folded(f"{len(causes) - 1} other possible cause(s)", f'<ol start="2">{others}</ol>'))
    return "".join(parts)


def _cause_title(cause: CauseLine) -> str:
    who = f" in <code>{escape(cause.variable)}</code>" if cause.variable else ""
    said = "" if cause.summary.lower() == cause.title.lower() else ": " + escape(cause.summary)
    return (
        f"<b>{escape(cause.title)}</b>{who}{said} "
        f'<span class="nbcg-dim" title="cause family, for tools and issues">({escape(cause.tag)})</span>'
    )


def _evidence_list(rows: tuple[EvidenceRow, ...], fix: str) -> str:
    items = "".join(f"<li>{escape(row.text)}{_INFERRED if row.inferred else ''}</li>" for row in rows)
    fixed = f'<div class="nbcg-fix"><b>Fix:</b> {code_spans(fix)}</div>' if fix else ""
    return (f"<ul>{items}</ul>" if items else "") + fixed


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
