"""What a report says, worded once: the verdict, the next steps, the causes, the evidence, the user's line.

Every format (text, Markdown, HTML, the widget's body) is a layout of one ``ReportContent``; none words anything
itself, so the terminal, the copied Markdown and the panel cannot disagree about a failure. Building it decides
nothing about the failure either: the classification comes from the Incident, the causes from the Diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass

from nb_cudaguard.diagnosis.causes import Cause, Diagnosis, Evidence
from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.panel.headline import CauseLine, EvidenceRow, Headline, headline_of
from nb_cudaguard.panel.memory import MemoryFacts, is_out_of_memory
from nb_cudaguard.record.assertions import AssertionRecord

CAUSES_SHOWN = 3
VALUES_SHOWN = 8
UNKNOWN_ASSERTION = "An assertion this catalog does not know: see the condition."


@dataclass(frozen=True)
class Verdict:
    """What the failure means for the session, and what to do first."""

    kind: str  # an Incident classification, or "out_of_memory"
    tone: str  # "error" | "warn" | "info": the colour the HTML gives it
    headline: str
    detail: str
    next_steps: tuple[str, ...] = ()


_FIX_AND_RERUN = "Fix the input below and run the cell again."
VERDICTS = {
    "poisoned": Verdict(
        "poisoned",
        "error",
        "CUDA context POISONED: every later CUDA call in this process fails. Restart needed.",
        "A restart in place replays the cells that built your variables, in a fresh process on the same kernel.",
        (
            "%cudaguard restart          restart in place and replay the cells that built your state",
            "%cudaguard restart --diagnose   ... then re-run the failing cell under %%cudacheck",
            "%%cudacheck                 at the top of the failing cell, once restarted, to pin the op",
        ),
    ),
    "recoverable": Verdict(
        "recoverable",
        "warn",
        "CUDA error, but the context still works: no restart needed.",
        _FIX_AND_RERUN,
        ("%%cudacheck                 at the top of the failing cell to check each op's inputs",),
    ),
    "not_cuda": Verdict(
        "not_cuda",
        "info",
        "A tensor op rejected its input (not a CUDA failure): no restart needed.",
        _FIX_AND_RERUN,
    ),
    "out_of_memory": Verdict(
        "out_of_memory",
        "warn",
        "Out of GPU memory: recoverable, no restart needed.",
        "Free what holds GPU memory, then run the cell again.",
    ),
}


def verdict_of(incident: Incident) -> Verdict:
    """An out-of-memory error never poisons the context: it gets its own verdict unless the probe says otherwise."""
    if incident.classification != "poisoned" and is_out_of_memory(incident):
        return VERDICTS["out_of_memory"]
    return VERDICTS[incident.classification]


@dataclass(frozen=True)
class AssertionLine:
    printed: str  # the assertion as the GPU printed it, shortened
    meaning: str


@dataclass(frozen=True)
class ReportContent:
    """One failure's report, every piece worded; the renderers only lay it out."""

    verdict: Verdict
    error: str  # the exception's type and the first line of its message
    message: str  # the exception's type and its whole message
    probe: str | None  # what the context check found, when it ran
    assertions: tuple[AssertionLine, ...]
    causes: tuple[CauseLine, ...]
    user_line: str | None
    notes: tuple[str, ...]
    tensors: tuple[tuple[str, str], ...] = ()  # (expression, one-line summary): the panel reads them
    memory: MemoryFacts | None = None  # out of memory: held, holders, how to free (the panel reads them)
    headline: Headline | None = None  # what is wrong and the fix, in one sentence each (none without a cause)


def build(
    incident: Incident,
    diagnosis: Diagnosis,
    tensors: list[tuple[str, str]] | None = None,
    memory: MemoryFacts | None = None,
    owner: str | None = None,
) -> ReportContent:
    """``owner``: the notebook's own name for the values the top cause is about (``panel.owner``), when known."""

    lines = incident.message.strip().splitlines()
    assertions = tuple(_assertion(record) for record in incident.assertions)
    shown = {a.meaning for a in assertions}  # said once, under the assertion, not again as evidence
    probe = None
    if incident.health.state != "unknown":
        probe = f"GPU check after the failure: {incident.health.detail}"
    causes = tuple(_cause(cause, shown) for cause in diagnosis.causes[:CAUSES_SHOWN])
    return ReportContent(
        verdict=verdict_of(incident),
        error=f"{incident.exc_type}: {lines[0] if lines else ''}",
        message=f"{incident.exc_type}: {incident.message.strip()}",
        probe=probe,
        assertions=assertions,
        causes=causes,
        user_line=_user_line(incident),
        notes=tuple(diagnosis.notes),
        tensors=tuple(tensors or ()),
        memory=memory,
        headline=headline_of(causes[0], owner) if causes and memory is None else None,
    )


def _assertion(record: AssertionRecord) -> AssertionLine:
    entry = catalog.lookup_assertion(record)
    return AssertionLine(record.to_text(), entry.cause if entry else UNKNOWN_ASSERTION)


def _user_line(incident: Incident) -> str | None:
    """The line of the cell the user ran that led to the failure (the call into a model's ``forward``, not the line
    inside it: ``usercode.users_line``), and, when it failed deeper in the user's own code, where."""
    frame, inner = incident.users_line, incident.user_frame
    if frame is None:
        return None
    line = f"{frame.where}: {frame.line}" if frame.line else frame.where
    if inner is not None and inner is not frame:
        line += f"  (via {inner.function}, {inner.where}" + (f": {inner.line})" if inner.line else ")")
    return line


def _cause(cause: Cause, shown: set[str]) -> CauseLine:
    return CauseLine(
        family=cause.family,
        variable=cause.variable,
        confidence=f"{cause.confidence:.0%}",
        summary=cause.summary,
        fix=cause.fix,
        evidence=tuple(_evidence(ev) for ev in cause.evidence if ev.text not in shown),
    )


def _evidence(ev: Evidence) -> EvidenceRow:
    return EvidenceRow(
        ev.text,
        not ev.direct,
        ev.variable,
        tuple(ev.values[:VALUES_SHOWN]) if ev.values else (),
        ev.count,
        ev.valid_range,
        ev.range_source,
    )
