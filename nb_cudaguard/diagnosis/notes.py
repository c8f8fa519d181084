"""The lines under a report's causes: what put the first cause first, what was not read, and the step that decides.

A ranking alone reads as if it knew; these lines say what it rests on (a printed assertion, the code, a prior) in the
user's terms, so that a guess is never taken for a reading, and name the step that reads the values.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis import calibration
from nb_cudaguard.diagnosis.causes import Cause, Diagnosis
from nb_cudaguard.diagnosis.evidence.context import Context
from nb_cudaguard.families import summary_of
from nb_cudaguard.incident.incident import Incident

__all__ = ["DECIDE", "for_diagnosis"]

DECIDE = (
    "The step that decides: re-run the failing cell under %%cudacheck (in a notebook with nb_cudaguard loaded: "
    "restart, replay and diagnose), which stops the op before it runs and names the values."
)
NARROWING = ("traceback", "log", "source")  # inferred evidence that names a family within the printed group


def _named(cause: Cause) -> str:
    """A cause in a note, as a person names it ("that the output layer has fewer units..."): a family's identifier
    is for tools and issues, and the report shows it only in the cause's tag."""
    return f'"{summary_of(cause.family)}"'


def for_diagnosis(incident: Incident, ctx: Context, diagnosis: Diagnosis) -> list[str]:
    """The report's notes: why the top cause leads (or that a prior put it there), and the step that decides."""
    notes = []
    frame = incident.user_frame
    if frame is not None and incident.classification == "poisoned":
        notes.append(f"CUDA reports kernel errors asynchronously: the op that failed may run before {frame.where}.")
    unread = [s for s in ctx._summaries.values() if not s.readable]
    if unread:  # no count: the panel lists tensors of its own, and a number here would head none of them
        notes.append(
            f"Values on the GPU were not read ({unread[0].why_not}): what the report says of them comes from "
            "shapes, host copies and the source."
        )
    top = diagnosis.top
    if top is not None and any(e.kind == "prior" for e in top.evidence):
        if diagnosis.alternatives:
            pass  # the alternatives' line says it, and the step that decides
        elif all(e.kind in ("prior", "error_text", "assertion") for e in top.evidence):
            notes.append(
                f"{_named(top)} is ranked first by a prior (how often each cause gave this symptom in the "
                f"corpus), not by anything in this log that names it. {DECIDE}"
            )
        else:
            decided = next(e for e in top.evidence if e.kind not in ("prior", "error_text", "assertion"))
            notes.append(f"Narrowed to {_named(top)} by: {decided.text}.")
    elif top is not None and top.family != "other" and not any(e.direct for e in top.evidence):
        notes.append(
            f"Inferred: no printed assertion and no value read says {_named(top)}; the traceback and the code "
            f"point at it. {DECIDE}"
        )
    elif top is not None and top.family != "other" and not any(e.kind in calibration.VALUES for e in top.evidence):
        direct = next(e for e in top.evidence if e.direct)
        narrowed = next((e for e in top.evidence if not e.direct and e.kind in NARROWING), None)
        if narrowed is not None and direct.kind in ("assertion", "error_text"):
            notes.append(
                f"The printed error names the group; narrowed to `{top.family}` by: {narrowed.text} (inferred, no "
                f"value was read). {DECIDE}"
            )
        else:
            notes.append(f"Ranked first by: {direct.text.rstrip('.')}. No value was read to confirm it. {DECIDE}")
    if top is None:
        notes.append("Nothing in reach names the cause: re-run the failing cell under %%cudacheck to pin the op.")
    elif top.family == "illegal_memory_access":
        notes.append(
            "No tensor value explains an illegal memory access: suspect a custom or third-party CUDA kernel, an "
            "out-of-bounds pointer, or an index passed to an op without bounds checks; run with "
            "CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel."
        )
    elif (
        top.family == "embedding_index_out_of_range"
        and not diagnosis.alternatives
        and not any(e.kind == "tensor" for e in top.evidence)
    ):
        notes.append(
            "An embedding index was out of range, but no tensor was in reach to say which table: token ids beyond "
            "the vocabulary, a sequence longer than max_position_embeddings, or token_type_ids beyond "
            "type_vocab_size. Give the code (explain --code FILE) or re-run under %%cudacheck."
        )
    elif top.family == "other":
        notes.append("Nothing in reach names the cause: re-run the failing cell under %%cudacheck to pin the op.")
    elif top.confidence < 0.5 and not diagnosis.alternatives:
        notes.append(
            f"Low confidence ({top.confidence:.0%}): no assertion line and no readable values point at one op; "
            "give the code (explain --code FILE) or re-run under %%cudacheck."
        )
    return notes
