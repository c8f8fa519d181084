"""The families a log cannot tell apart, said as one answer in one line with the step that decides.

A log of only ``t >= 0 && t < n_classes`` says a class label was out of range for the loss; whether the labels are
wrong or the head too small, nothing in it says. The prior then ranks the group's families, and the report must not
read as if it knew: it names them as alternatives ("labels out of range, or a head too small for the classes") and
the step that reads the values (restart, replay and diagnose in a poisoned notebook; ``--code`` or ``%%cudacheck``
for a log). The same holds after the first answer: an index assertion says an index was out of bounds, not whether
it was labels or position ids used as one, so each such group is one answer too. ``tools/corpus_score.py`` counts
an answer of several families as one for the first three, and says so.
"""

from __future__ import annotations

from nb_cudaguard.diagnosis import calibration
from nb_cudaguard.diagnosis.causes import Cause, Diagnosis
from nb_cudaguard.families import group_of, short_of
from nb_cudaguard.incident.incident import Incident

__all__ = ["answers", "lines"]

SAID = 3  # the answers a report's lines spell out: the first three, as the corpus's figures count them


def answers(causes: list[Cause]) -> list[list[str]]:
    """The causes as answers, in their order: a cause the prior alone ranks takes with it the other such causes
    of its group (nothing read tells them apart: a bare device-side assert says not even which op, and an index
    assertion not whose values were the index), at the place of the first; any other cause is an answer alone.
    Only where the first cause rests on a printed text or the prior: after a cause the evidence chose, the rest is
    each its own answer."""
    result: list[list[str]] = []
    placed: set[str] = set()
    # where the code, the log's words or a value read chose the first cause, the others are not said as groups
    grouping = bool(causes) and calibration.answer_kind(causes[0]) in ("named", "prior")
    for i, cause in enumerate(causes):
        if cause.family in placed:
            continue
        answer = [cause.family]
        if grouping and cause.family != "other" and calibration.answer_kind(cause) == "prior":
            answer += [
                c.family
                for c in causes[i + 1 :]
                if group_of(c.family) == group_of(cause.family)
                and calibration.answer_kind(c) == "prior"
                and c.family not in placed
            ]
        result.append(answer)
        placed.update(answer)
    return result


def lines(diagnosis: Diagnosis, incident: Incident, code: str | None) -> list[str]:
    """The report's lines for its answers of several families: the first with the step that decides, and one for
    the later ones among the first three."""
    said = []
    if diagnosis.alternatives:
        said.append(_first(diagnosis, incident, code))
    later = [answer for answer in diagnosis.answers[1:SAID] if len(answer) > 1]
    if later:
        groups = "; or ".join(_words(answer) for answer in later)
        said.append(f"Next likeliest by how often each causes this error, nothing read here tells which: {groups}.")
    return said


def _words(answer: list[str]) -> str:
    return ", or ".join(short_of(f) for f in answer)


def _first(diagnosis: Diagnosis, incident: Incident, code: str | None) -> str:
    """One line: the alternatives in the user's words, that the log cannot tell which (nor, where no text names
    the op, whether it was their group at all: they are the likeliest), and the step that decides."""
    words = _words(diagnosis.alternatives)
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
