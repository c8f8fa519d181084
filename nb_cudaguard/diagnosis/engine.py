"""Turn an Incident into ranked causes, each naming the user's variable, the values, the valid range and a fix.

Three kinds of evidence are combined:

1. the catalog: the printed assertion condition and the error text, which say which *group* of ops failed
   (direct evidence, but rarely the whole story);
2. the user's objects: tensors, modules, configs, tokenizers and datasets in the failing frames and the
   namespace (``evidence.workspace``), read only where safe (``tensors``);
3. the source: the failing line, the cell, the journal's earlier cells and ``--code`` (``evidence.static``), plus
   what the traceback's own lines say (``evidence.textual``).

The analysers refine a group into a family. A family consistent with the printed assertion inherits its
support; one that contradicts it keeps half of its own. Several pieces of evidence for one family add up as
independent odds (1 - Π(1 - c)). Where nothing narrows a group to one family, or nothing names a group at all,
the families are ranked by how often they caused this symptom in the corpus (``evidence.prior``): a low, labelled
confidence, never an empty answer for a CUDA error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nb_cudaguard.diagnosis import alternatives, calibration, checked, notes
from nb_cudaguard.diagnosis.causes import Cause, Diagnosis, Evidence
from nb_cudaguard.diagnosis.evidence import (
    classes,
    codehints,
    embeddings,
    indexing,
    libsites,
    lognumbers,
    logwords,
    losses,
    prior,
    textual,
)
from nb_cudaguard.diagnosis.evidence.context import Context
from nb_cudaguard.diagnosis.evidence.static import LineFacts, line_facts, read_sources
from nb_cudaguard.diagnosis.evidence.workspace import build_workspace
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.families import fix_of, group_of, summary_of
from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.incident import Incident

__all__ = ["diagnose"]

Analyser = Callable[[Context], list[Cause]]
ANALYSERS: tuple[tuple[str, Analyser], ...] = (
    ("class labels", classes.analyse),
    ("embeddings", embeddings.analyse),
    ("indexing", indexing.analyse),
    ("losses and sampling", losses.analyse),
)
JOURNAL_CELLS = 200
CONTRADICTION = 0.5  # what a cause keeps when the printed assertion points at another group
# Families an assertion of another group still supports: srcIndex < srcSelectDimSize is index_select's assertion
# as much as the embedding's; an index assertion (x[idx], gather, scatter and one_hot's scatter) is raised as often on
# labels or position ids used as the index as on an index of the user's own (5 of the dev half's 11 index
# assertions); a float index or a NaN cast to an index ends in any index-checking kernel.
_ALSO_SUPPORTED_BY = {
    "index": ("embedding",),
    "embedding": ("index",),
    "class_index": ("index",),
    "dtype": ("class_index", "embedding", "index"),
}
_NAN_SUPPORTED_BY = ("index", "embedding", "class_index")
# Groups whose assertion says which family failed (Loss.cu asserts the BCE input and the target separately; an
# index assertion names its kernel's op: IndexKernel.cu is x[idx], ScatterGatherKernel.cu gather/scatter): the
# prior ranks the others' families within the group, never the asserted one below its sibling.
_ASSERTION_NAMES_FAMILY = frozenset({"bce", "index"})
# The families of such a group whose op runs the named family's kernel: one_hot on CUDA leaves its range to
# scatter's assertion (aten/src/ATen/native/Onehot.cpp); a NaN cast to an index ends in any index kernel. A sibling
# not listed cannot have printed that assertion (x[idx] never runs ScatterGatherKernel.cu), so the prior does not
# put it forward.
_RAISED_THROUGH = {
    "gather_scatter_index": ("one_hot_num_classes", "nan_or_inf"),
    "advanced_index_out_of_bounds": ("nan_or_inf",),
}
# The groups whose values an assertion is often raised on, though its kernel is another group's: labels and position
# ids used as the index of x[idx], gather or one_hot's scatter (5 of the dev half's 11 index assertions; an embedding
# assertion's, 1 of 17, is not listed). The prior puts their families forward after the op's own.
_RAISED_ON = {"index": ("class_index", "embedding")}
PRIOR_WEIGHT = 0.3  # what the whole prior is worth next to evidence about this log
PRIOR_GROUPS = 3  # groups the prior puts forward whole when nothing names one: the report's first three answers


def _combine(*confidences: float) -> float:
    remaining = 1.0
    for value in confidences:
        remaining *= 1.0 - value
    return 1.0 - remaining


def _catalog_causes(incident: Incident) -> tuple[dict[str, Cause], bool]:
    """The printed assertions' and error texts' causes by family, and whether the log names what failed outside
    our families only (then no family is put forward by the prior: a bernoulli assertion is no label's)."""
    by_family: dict[str, Cause] = {}
    hits = catalog.hits_for(incident.text, incident.assertions)
    for hit in hits:
        evidence = Evidence(kind=hit.source, text=hit.detail, direct=True)
        cause = by_family.get(hit.family)
        if cause is None:
            by_family[hit.family] = Cause(hit.family, hit.confidence, summary_of(hit.family), hit.fix, [evidence])
        else:
            cause.confidence = _combine(cause.confidence, hit.confidence)
            cause.evidence.append(evidence)
    return by_family, any(h.definite for h in hits) and all(h.family == "other" for h in hits)


def _sources(incident: Incident, code: str | None, journal: Iterable | None) -> list[str]:
    sources = []
    if journal is not None:
        cells = list(journal)[-JOURNAL_CELLS:]
        sources += [c.transformed or c.source for c in cells if c is not incident.cell]
    if incident.cell is not None:
        sources.append(incident.cell.transformed or incident.cell.source)
    if code:
        sources.append(code)
    return sources


def _raised_in_torch(incident: Incident) -> bool:
    return incident.exc_type.startswith("torch") or any("torch" in f.filename for f in incident.frames)


def _failing_line(incident: Incident) -> LineFacts:
    frame = incident.user_frame
    return line_facts(frame.line) if frame is not None and frame.line else LineFacts()


def diagnose(incident: Incident, *, code: str | None = None, journal: Iterable | None = None) -> Diagnosis:
    """``code``: a script or cell source given with ``explain --code``; ``journal``: the cells run before this one."""
    if isinstance(incident.exception, CudaCheckError):
        # %%cudacheck stopped the op before it ran: its values are certain; the workspace, read on the same healthy
        # context, may narrow the family within the group and name the variable in the user's own code.
        try:
            analysed: Diagnosis | None = _analyse(incident, code, journal)
        except Exception:  # the check's own finding stands without the workspace's
            analysed = None
        return checked.combine(incident.exception, analysed, incident.namespace)
    return _analyse(incident, code, journal)


def _analyse(incident: Incident, code: str | None, journal: Iterable | None) -> Diagnosis:
    diagnosis = Diagnosis()
    asserted, outside_families = _catalog_causes(incident)
    sources = _sources(incident, code, journal)
    static = read_sources(sources)
    hints = textual.hints_for(incident) + libsites.hints_for(incident) + lognumbers.hints_for(incident)
    hints += codehints.hints_for(sources, static)
    named = {group_of(f) for f in asserted} | {group_of(h.family) for h in hints}
    hints += logwords.hints_for(incident, frozenset(named - {"other"}))
    # a check's error is raised by nb_cudaguard (the fast checks' at the cell's end), and always stands for a device op
    checked_op = isinstance(incident.exception, CudaCheckError)
    plain_python_error = incident.classification == "not_cuda" and not _raised_in_torch(incident) and not checked_op
    if plain_python_error and code is None and not asserted and not hints:
        if incident.health.source == "log":
            diagnosis.notes.append(
                "Nothing in this log is a CUDA error, a device assertion or a frame in torch, so no cause is "
                f"ranked. If it came from a GPU run, the CUDA error was cut off: paste the whole output. {notes.DECIDE}"
            )
        return diagnosis  # the user's tensors have nothing to do with it
    wanted_prior = (not plain_python_error or asserted or hints) and not outside_families
    ranking = prior.prior_for(incident) if wanted_prior else None
    expected = {group_of(f) for f in asserted} | {group_of(h.family) for h in hints}
    ctx = Context(
        incident=incident,
        workspace=build_workspace(incident),
        static=static,
        line=_failing_line(incident),
        expected_groups=frozenset(expected - {"other"}),
    )
    found: list[Cause] = []
    for name, analyser in ANALYSERS:
        try:
            found += analyser(ctx)
        except Exception as exc:  # one analyser's surprise must not cost the user the others
            diagnosis.notes.append(f"The {name} check could not finish ({type(exc).__name__}: {exc}).")
    diagnosis.causes = calibration.exclusive(
        _rank(asserted, _not_against_values(hints, found), found, ranking), ranking
    )
    diagnosis.answers = alternatives.answers(diagnosis.causes)
    diagnosis.notes += alternatives.lines(diagnosis, incident, code)
    diagnosis.notes += notes.for_diagnosis(incident, ctx, diagnosis)
    return diagnosis


def _not_against_values(hints: list[textual.Hint], found: list[Cause]) -> list[textual.Hint]:
    """The hints the values read leave standing: where an analyser read the offending values of a group (on the
    host, from the batch the device copy was made from, or on a healthy device), a family of that group that no
    value showed is not raised by a guess from the code (an unrelated ``label - 1`` is no negative label)."""
    read = {c.family for c in found if any(e.kind in calibration.VALUES and e.values for e in c.evidence)}
    decided = {group_of(f) for f in read}
    return [h for h in hints if group_of(h.family) not in decided or h.family in read]


def _rank(
    asserted: dict[str, Cause], hints: list[textual.Hint], found: list[Cause], ranking: prior.Prior | None
) -> list[Cause]:
    group_support: dict[str, Cause] = {}
    for cause in asserted.values():
        group = group_of(cause.family)
        if group != "other" and (group not in group_support or group_support[group].confidence < cause.confidence):
            # a copy: the asserted cause is also ranked below, and its ranking must not move its group's support
            group_support[group] = Cause(cause.family, cause.confidence, cause.summary, cause.fix, list(cause.evidence))
    merged: dict[str, Cause] = {}
    own: dict[str, float] = {}
    for cause in found:  # the analysers' best cause per family
        known = merged.get(cause.family)
        if known is None or known.confidence < cause.confidence:
            merged[cause.family] = cause
            own[cause.family] = cause.confidence
    group_hints: dict[str, textual.Hint] = {}
    for hint in hints:
        if hint.group_only:
            known_hint = group_hints.get(group_of(hint.family))
            if known_hint is None or known_hint.weight < hint.weight:
                group_hints[group_of(hint.family)] = hint
            continue
        evidence = Evidence(hint.kind, hint.text, direct=False)
        if hint.family in merged:
            merged[hint.family].evidence.append(evidence)
            own[hint.family] = _combine(own[hint.family], hint.weight)
        else:
            merged[hint.family] = Cause(
                hint.family, hint.weight, summary_of(hint.family), _fix_for(hint.family, asserted), [evidence]
            )
            own[hint.family] = hint.weight
    for family, cause in asserted.items():
        # a text that names a family finer than its group's strongest hit (one_hot's own message next to the
        # scatter assertion it runs on) is evidence for that family, not only for the group
        support = group_support.get(group_of(family))
        finer = cause.confidence if support is not None and support.family != family else 0.0
        if family in merged:
            merged[family].evidence = cause.evidence + merged[family].evidence
            own[family] = _combine(own[family], finer)
            if merged[family].fix == _fix_for(family, {}):
                merged[family].fix = cause.fix
        else:
            merged[family] = cause
            own[family] = finer
    if ranking is not None:
        _add_prior_candidates(merged, own, group_support, group_hints, ranking, asserted)
    for family, cause in merged.items():
        group = group_of(family)
        others = _NAN_SUPPORTED_BY if family == "nan_or_inf" else _ALSO_SUPPORTED_BY.get(group, ())
        candidates = [group_support[g] for g in (group, *others) if g in group_support]
        support = max(candidates, key=lambda c: c.confidence, default=None)
        within = ranking.within_group(family) if ranking is not None else 1.0
        if support is not None:
            named = group in _ASSERTION_NAMES_FAMILY and family in asserted
            if own[family] > 0 or ranking is None or named:
                cause.confidence = _combine(support.confidence, own[family])
            else:  # the group is known (or one it supports), the family only by the prior (unless it is alone there)
                among = ranking.share_among(family, _supported_by(group_of(support.family)))
                cause.confidence = support.confidence * among
                if among < 1.0:
                    cause.evidence.append(_prior_evidence(ranking, family, within_group=True))
            if support.family != family:
                cause.evidence = cause.evidence + support.evidence  # the user's values first, the assertion after
        elif group_support and family != "other":
            cause.confidence = own[family] * CONTRADICTION
        elif family != "other" and ranking is not None:
            by_group = group_hints[group].weight * within if group in group_hints else 0.0
            by_prior = PRIOR_WEIGHT * ranking.share(family)
            cause.confidence = _combine(own[family], by_group, by_prior)
            if group in group_hints:
                cause.evidence.append(Evidence("traceback", group_hints[group].text, direct=False))
            cause.evidence.append(_prior_evidence(ranking, family, within_group=group in group_hints))
        else:
            cause.confidence = max(own[family], cause.confidence if family in asserted else 0.0)
    ranked = sorted(merged.values(), key=lambda c: (c.family == "other", -c.confidence))
    if ranked and ranked[0].family != "other" and ranked[0].confidence >= 0.5:
        ranked = [c for c in ranked if c.family != "other"]  # "a kernel failed" adds nothing to a named cause
    return ranked


def _add_prior_candidates(
    merged: dict[str, Cause],
    own: dict[str, float],
    group_support: dict[str, Cause],
    group_hints: dict[str, textual.Hint],
    ranking: prior.Prior,
    asserted: dict[str, Cause],
) -> None:
    """The families the prior puts forward: every family of a group the log names (the assertion, or the frames
    when there is no assertion), and the most frequent ones when nothing names a group."""
    named_groups = {g for asserted_group in group_support for g in _supported_by(asserted_group)} or set(group_hints)
    wanted = [f for f, _ in ranking.ranked() if group_of(f) in named_groups]
    if not named_groups:
        # the likeliest groups whole, by their families' shares: the report states each as one answer (nothing
        # read tells its families apart), not one family of it by chance
        totals: dict[str, float] = {}
        for family, share in ranking.ranked():
            totals[group_of(family)] = totals.get(group_of(family), 0.0) + share
        groups = sorted(totals, key=lambda g: -totals[g])[:PRIOR_GROUPS]
        wanted = [f for f, _ in ranking.ranked() if group_of(f) in groups]
    printed = [f for f in asserted if group_of(f) in _ASSERTION_NAMES_FAMILY and f in _RAISED_THROUGH]
    if printed:
        raised = {g: (f, *_RAISED_THROUGH[f]) for f in printed for g in [group_of(f)]}
        wanted = [f for f in wanted if group_of(f) not in raised or f in raised[group_of(f)]]
    for family in wanted:
        if family not in merged:
            merged[family] = Cause(family, 0.0, summary_of(family), _fix_for(family, asserted), [])
            own[family] = 0.0


def _supported_by(asserted_group: str) -> frozenset[str]:
    """The groups whose families the prior puts forward for an assertion of ``asserted_group``: its own, and those
    whose values it is often raised on (``_RAISED_ON``)."""
    return frozenset({asserted_group, *_RAISED_ON.get(asserted_group, ())})


def _prior_evidence(ranking: prior.Prior, family: str, *, within_group: bool) -> Evidence:
    if within_group:
        share = ranking.within_group(family)
        where = f"{share:.0%} of the {group_of(family)}-group causes"
    else:
        share = ranking.share(family)
        where = f"{share:.0%} of the causes"
    return Evidence("prior", f"prior, not evidence about this log: {where} among {ranking.describe()}", direct=False)


def _fix_for(family: str, asserted: dict[str, Cause]) -> str:
    """The printed assertion's own fix where there is one (it names the op), else the family's usual fix."""
    return asserted[family].fix if family in asserted else fix_of(family)
