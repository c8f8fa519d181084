"""The families a log cannot tell apart, said as one answer in one line with the step that decides.

A log of only ``t >= 0 && t < n_classes`` says a class label was out of range for the loss; whether the labels are
wrong or the head too small, nothing in it says. The prior then ranks the group's families, and the report must not
read as if it knew: it names them as alternatives ("labels out of range, or a head too small for the classes") and
the step that reads the values (restart, replay and diagnose in a poisoned notebook; ``--code`` or ``%%cudacheck``
for a log). ``tools/corpus_score.py`` counts such a line as one answer for the first three, and says so.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis import calibration
from nb_cudaguard.diagnosis.causes import Cause, Diagnosis
from nb_cudaguard.families import group_of, short_of
from nb_cudaguard.incident.incident import Incident

__all__ = ["line", "undecided"]


def undecided(causes: list[Cause]) -> list[str]:
    """The families of the top cause's group that nothing read tells apart: the prior alone ranks them (a bare
    device-side assert says not even which op), so the group's families among the causes are one answer."""
    top = causes[0] if causes else None
    if top is None or top.family == "other" or calibration.answer_kind(top) != "prior":
        return []
    same = [c.family for c in causes if group_of(c.family) == group_of(top.family)]
    return same if len(same) > 1 else []


def line(diagnosis: Diagnosis, incident: Incident, code: str | None) -> str:
    """One line: the alternatives in the user's words, that the log cannot tell which (nor, where no text names
    the op, whether it was their group at all: they are the likeliest), and the step that decides."""
    words = ", or ".join(short_of(f) for f in diagnosis.alternatives)
    if any(e.direct for e in diagnosis.causes[0].evidence):
        said = "nothing read here tells which (the order is the prior's: how often each causes this error)"
    else:
        said = "the likeliest by the prior (how often each causes this error), though nothing here names the op"
    return f"{words[:1].upper()}{words[1:]}: {said}; {_step(incident, code)}."


def _step(incident: Incident, code: str | None) -> str:
    if incident.health.source == "log":
        if code is None:
            return "`--code FILE` (the script that failed) or a re-run of the failing cell under %%cudacheck decides"
        return "a re-run of the failing cell under %%cudacheck decides: it reads the values"
    if incident.classification == "poisoned":
        return (
            "`%cudaguard restart --diagnose` decides: it restarts in place, replays your cells and re-runs the "
            "failing cell under %%cudacheck, which reads the values"
        )
    return "re-running the failing cell under %%cudacheck decides: it reads the values"
