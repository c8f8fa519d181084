"""One cause from what ``%%cudacheck`` pinned and what the user's objects say about it.

The check read the very values the op received, so its op, argument, offending values, positions and valid range
are certain. Two things it cannot see from inside the op are in the user's workspace, which the analysers read on
the same, healthy context:

- which family of the group it is: labels past the classes of ``F.cross_entropy`` are ``label_out_of_range`` to
  the op, but ``num_classes_mismatch`` when the labels are right and the output layer (``num_labels``,
  ``out_features``) is too small; an embedding index past its table may be a sequence longer than the position
  table or a tokenizer that grew;
- the user's variable, where the op's argument was made inside their model (``position_ids`` is built in the
  model's ``forward`` from the length of the cell's ``input_ids``).

So the check's finding is kept whole, and the analysers' best cause of the same group may narrow the family
within the group (never across it, never against the values: a negative label stays ``negative_label``) and name
the variable when the check's is not one in the user's namespace.
"""

from __future__ import annotations

import re
from dataclasses import replace

from nb_cudaguard.diagnosis.causes import Cause, Diagnosis, cause_from_check
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.families import group_of
from nb_cudaguard.incident.incident import Incident

# What the workspace may narrow a checked family to: the family the op's values show, into the cause behind them.
NARROWS = {
    "label_out_of_range": frozenset({"num_classes_mismatch"}),
    "embedding_index_out_of_range": frozenset(
        {"vocab_resize_missing", "position_ids_too_long", "token_type_ids_out_of_range"}
    ),
    # RoBERTa gathers its token-type buffer (max_position_embeddings long) at the position ids: that gather's index
    # past the buffer is a sequence past the position table, which the config shows (the one narrowing across
    # groups, and only with the model's own evidence)
    "gather_scatter_index": frozenset({"position_ids_too_long"}),
}
CHECKED = "%%cudacheck stopped this op before it ran: the context is healthy."
# Evidence that says why a family is narrowed, most telling first: what the model or config is, then the values.
_EXPLAINS = ("config", "module", "tokenizer", "source", "journal", "tensor")
_ROOT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def combine(error: CudaCheckError, analysed: Diagnosis | None, namespace: dict | None) -> Diagnosis:
    """The check's cause, narrowed and named by ``analysed`` (the analysers' diagnosis of the same incident)."""
    cause = cause_from_check(error)
    notes = [CHECKED]
    partner = _partner(error, analysed)
    if partner is None:
        return Diagnosis(causes=[cause], notes=notes, answers=[[cause.family]])
    if partner.family != error.family and partner.family in NARROWS.get(error.family, ()):
        cause.family = partner.family
        cause.fix = partner.fix
        reasons = sorted((e for e in partner.evidence if e.kind in _EXPLAINS), key=lambda e: _EXPLAINS.index(e.kind))
        because = f" by: {reasons[0].text}" if reasons else ""
        notes.append(f"Narrowed from `{error.family}` (what the op's values show) to `{partner.family}`{because}.")
    if partner.variable and partner.variable != error.variable and not _in_namespace(error.variable, namespace):
        cause.variable = partner.variable
        notes.append(
            f"{error.argument} of {error.op} was "
            + (f"{error.variable}, made inside the called code" if error.variable else "made inside the called code")
            + f"; in your code it comes from {partner.variable}."
        )
    cause.evidence += [e for e in partner.evidence if e.kind not in ("assertion", "error_text", "prior")]
    return Diagnosis(causes=[cause], notes=notes, answers=[[cause.family]])


def _partner(error: CudaCheckError, analysed: Diagnosis | None) -> Cause | None:
    """The analysers' highest-ranked cause of the check's group that names a variable: the one to narrow with."""
    if analysed is None:
        return None
    group = group_of(error.family)
    narrows = NARROWS.get(error.family, frozenset())
    for cause in analysed.causes:
        if not cause.variable or cause.family not in {error.family} | narrows:
            continue
        explained = any(e.kind in _EXPLAINS[:3] for e in cause.evidence)
        if group_of(cause.family) == group or explained:
            return cause
    return None


def _in_namespace(variable: str | None, namespace: dict | None) -> bool:
    """Whether the check's name is the user's own (a variable of the notebook, or an entry of one), not a name that
    exists only inside the code they called."""
    if not variable or namespace is None:
        return False
    root = _ROOT.match(variable)
    return root is not None and root.group(0) in namespace


_VALUES = ("guard", "tensor")  # evidence that read the values themselves
_CHECK_MAGIC = re.compile(r"\A\s*%%cudacheck[^\n]*\n")


class ReadByChecks:
    """What a check read, for the reports that follow (issue 31 point 4: a pin beats both evidence and a prior).

    A check (``%%cudacheck``, a fired fast check) stops an op and reads the values it received; the same cell run
    again without it poisons the context, and that run's device values can no longer be read. Its report then says
    what the check read in that cell (same code, the error of the same group, nothing read in this run), not the
    prior's ranking: the values beat a guess. A cell changed since, or a run whose own values were read, keeps its
    own diagnosis."""

    def __init__(self) -> None:
        self._by_code: dict[str, tuple[str, Diagnosis]] = {}  # the cell's code -> its label, the check's diagnosis

    def after(self, incident: Incident, diagnosis: Diagnosis) -> Diagnosis:
        """``diagnosis`` of ``incident``, or the check's of the same cell in its place; remembers a check's."""
        cell = incident.cell
        if cell is None:
            return diagnosis
        code = _CHECK_MAGIC.sub("", cell.source).strip()
        if isinstance(incident.exception, CudaCheckError):
            if diagnosis.causes:
                self._by_code[code] = (cell.label, diagnosis)
            return diagnosis
        found = self._by_code.get(code)
        top = diagnosis.top
        if found is None or (top is not None and any(e.kind in _VALUES and e.values for e in top.evidence)):
            return diagnosis
        label, read = found
        if top is not None and group_of(top.family) != group_of(read.causes[0].family):
            return diagnosis
        return _carried(label, read, diagnosis)


def _carried(label: str, read: Diagnosis, later: Diagnosis) -> Diagnosis:
    """The check's causes first, the later run's other causes after them in what the first leaves."""
    first = read.causes[0]
    causes = [replace(c, evidence=list(c.evidence)) for c in read.causes]
    left = max(0.0, 1.0 - first.confidence)
    for cause in later.causes:
        if cause.family not in {c.family for c in causes}:
            causes.append(replace(cause, confidence=min(cause.confidence, left)))
    note = (
        f"Read by the check that stopped this code's op in cell {label}: this run's values are on the poisoned "
        "device and cannot be read, and the same code failed the same way."
    )
    notes = [note, *(n for n in later.notes if n not in read.notes)]
    return Diagnosis(causes=causes, notes=notes, answers=[[c.family] for c in causes])
