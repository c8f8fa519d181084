"""Score the diagnosis on the corpus of real logs, by split, family, group and kind of log.

    PYTHONPATH=. python tools/corpus_score.py              # the figures for both halves
    PYTHONPATH=. python tools/corpus_score.py --dev-misses # what the dev half gets wrong: the only cases to tune on
    PYTHONPATH=. python tools/corpus_score.py --dev-halves # the dev half split again: tune on "look", check "check"
    PYTHONPATH=. python tools/corpus_score.py --ceiling    # the most any diagnosis could score on each half

The held-out half is scored and never listed case by case: rules are changed only by looking at dev misses.
The prior (``data/priors.json``) is counted on the dev half, so each dev log is scored with a prior counted
without it (leave-one-out): the dev figures are then as honest as the held-out ones about the prior.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from corpus_add import CORPUS, entries

from nb_cudaguard.diagnosis import calibration, diagnose
from nb_cudaguard.diagnosis.evidence import prior
from nb_cudaguard.families import group_of
from nb_cudaguard.incident.logparse import incident_from_log

SPLITS = ("held_out", "dev")
_ASSERTION = re.compile(r"Assertion `|Device-side assertion `|Assertion '")
# A library frame in any traceback format: Python's (``File "...", line``), IPython 8's (``File /...py:12, in``) and
# IPython 7's (``/...py in forward(``), the last two being what notebook users paste.
_LIBRARY_FRAME = re.compile(
    r'File "[^"]*(site-packages|dist-packages|/lib/python)'
    r"|^\s*(?:File )?\S*(?:site-packages|dist-packages|/lib/python)\S*\.py(?::\d+,| in \w)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Scored:
    entry: dict
    kind: str  # "assertion" | "frames" | "generic"
    with_code: bool
    families: tuple[str, ...]  # ranked, as explain gives them
    confidence: float
    raw_confidence: float  # the top cause's score before calibration: what the calibration is fitted on
    answer_kind: str | None  # the curve the top cause goes through (calibration.answer_kind)
    stated: tuple[tuple[str, ...], ...]  # the report's answers, each the families it states as one (Diagnosis.answers)
    only_the_error: bool  # nothing but the error's own lines: see ``says_only_the_error``

    @property
    def top1(self) -> bool:
        return self.families[:1] == (self.entry["family"],)

    @property
    def top3(self) -> bool:
        return self.entry["family"] in self.families[:3]

    @property
    def top3_answers(self) -> bool:
        return any(self.entry["family"] in answer for answer in self.stated[:3])

    @property
    def empty(self) -> bool:
        return not self.families

    @property
    def group_top1(self) -> bool:
        return bool(self.families) and group_of(self.families[0]) == group_of(self.entry["family"])


# What two copies of one failure's log may differ in without saying anything about its cause: the block and thread
# of each assertion, where PyTorch was built (path prefix, line numbers), and the hint lines every CUDA error carries.
_HINT_LINE = re.compile(
    r"kernel errors might be asynchronously|consider passing CUDA_LAUNCH_BLOCKING|Compile with `?TORCH_USE_CUDA_DSA",
    re.IGNORECASE,
)
_BLOCK_THREAD = re.compile(r"block: \[[\d, ]+\], thread: \[[\d, ]+\]")
_BUILD_PATH = re.compile(r"\S*/(\w+\.(?:cu|cuh|cpp|h))(?::\d+)?")


def _distinct_lines(entry: dict) -> tuple[frozenset[str], str | None]:
    """The log's distinct lines once the noise above is gone, and its code."""
    lines = set()
    for line in (CORPUS / entry["log"]).read_text().splitlines():
        if line.strip() and not _HINT_LINE.search(line):
            line = _BUILD_PATH.sub(r"\1", _BLOCK_THREAD.sub("", line))
            lines.add(re.sub(r"^[\s>….]+", "", line).strip().lower())
    code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
    return frozenset(lines), code


def what_a_log_says(entry: dict) -> tuple[frozenset[str], str | None]:
    """What a diagnosis can read in the log: two logs that say the same get the same ranking from any reader, so
    at most the commoner of their causes can be top-1. A log of only the error's lines says which error it is
    and nothing more (``what_the_error_names``); any other log is its distinct lines and its code."""
    lines, code = _distinct_lines(entry)
    if code is None and all(_ERROR_LINE.search(line) for line in lines):
        return frozenset({what_the_error_names(entry)}), None
    return lines, code


def what_the_error_names(entry: dict) -> str:
    """The symptom and the assertions' files, kernels and conditions: the user's words typed around the error
    ("Solve!!!"), the exception's class (``RuntimeError`` or ``torch.AcceleratorError``), the source line and the
    kernel's template arguments differ between copies of one failure and say nothing of its cause."""
    incident = incident_from_log((CORPUS / entry["log"]).read_text())
    asserted = sorted({(Path(a.file).name, kernel_name(a.kernel), a.condition) for a in incident.assertions})
    return f"{incident.exc_type} {prior.symptom_of(incident)} {asserted}"


# A line that is part of the error itself: a device assertion, the CUDA error, a secondary symptom's status.
_ERROR_LINE = re.compile(
    r"assert|cuda error|cuda runtime error|cublas|cudnn|illegal memory access|copy_if failed|launch failure"
    r"|cudaErrorAssert|AcceleratorError",
    re.IGNORECASE,
)


def kernel_name(signature: str) -> str:
    """``void cunn_ClassNLLCriterion_updateOutput_kernel(T *, ...)`` and ``bce_functor<float>::operator()`` as
    the name alone, as newer releases print it."""
    return " ".join(re.sub(r"[<(].*", "", signature).split()[-1:])


def says_only_the_error(entry: dict) -> bool:
    """The log is the error and nothing else (no frame, no printout, no code): whatever reads it can rank the
    causes of that error only by how often each causes it."""
    lines, code = _distinct_lines(entry)
    return code is None and all(_ERROR_LINE.search(line) for line in lines)


def ceiling(split_entries: list[dict]) -> tuple[int, int]:
    """The most top-1 families and groups any diagnosis reading these logs could get: each set of logs that say the
    same thing scores at most the count of its commonest family (and group)."""
    alike: dict[tuple[frozenset[str], str | None], list[dict]] = defaultdict(list)
    for entry in split_entries:
        alike[what_a_log_says(entry)].append(entry)
    family = sum(max(Counter(e["family"] for e in same).values()) for same in alike.values())
    group = sum(max(Counter(group_of(e["family"]) for e in same).values()) for same in alike.values())
    return family, group


def kind_of(log: str) -> str:
    """What the log carries: a device assertion line, library frames of a traceback, or the generic message only."""
    if _ASSERTION.search(log):
        return "assertion"
    if _LIBRARY_FRAME.search(log):
        return "frames"
    return "generic"


def dev_half(entry: dict) -> str:
    """A fixed split of the dev half by a hash of the id: a change made by reading only the "look" half's misses and
    scored on the "check" half says whether it generalises, before the held-out half is scored at all."""
    return ("look", "check")[int(hashlib.sha256(entry["id"].encode()).hexdigest(), 16) % 2]


def dev_rows(all_entries: list[dict]) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """Each dev log's row of the prior's counts (``tools/build_priors.py`` counts the same rows)."""
    rows = {}
    for entry in all_entries:
        if entry["split"] == "dev":
            incident = incident_from_log((CORPUS / entry["log"]).read_text())
            rows[entry["id"]] = (prior.symptom_of(incident), prior.domains_of(incident), entry["family"])
    return rows


def score(entry: dict, rows: dict[str, tuple[str, tuple[str, ...], str]] | None = None) -> Scored:
    """``rows``: score a dev log with a prior counted on the other dev logs only."""
    log = (CORPUS / entry["log"]).read_text()
    code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
    if rows is not None and entry["id"] in rows:
        prior.use_table(prior.tally([row for key, row in rows.items() if key != entry["id"]]))
    try:
        incident = incident_from_log(log)
        diagnosis = diagnose(incident, code=code)
        with calibration.disabled():
            raw = diagnose(incident, code=code).top
    finally:
        prior.use_table(None)
    top = diagnosis.top
    families = tuple(c.family for c in diagnosis.causes)
    return Scored(
        entry,
        kind_of(log),
        code is not None,
        families,
        top.confidence if top else 0.0,
        raw.confidence if raw else 0.0,
        calibration.answer_kind(raw) if raw else None,
        tuple(tuple(answer) for answer in diagnosis.answers),
        says_only_the_error(entry),
    )


def _ratio(rows: list[Scored], attribute: str) -> str:
    hits = sum(getattr(row, attribute) for row in rows)
    return f"{hits}/{len(rows)} = {hits / len(rows):.0%}" if rows else "-"


CONFIDENT = 0.8  # the confidence at which an answer must be right 85 % of the time (issue 31)
BINS = 10


def reliability(rows: list[Scored]) -> tuple[list[tuple[str, int, float, float]], float]:
    """The top cause's confidence against how often it is right, in ten bins of confidence: (bin, logs, mean
    confidence, share right) per non-empty bin, and the expected calibration error (the bins' gaps, weighted)."""
    bins: dict[int, list[Scored]] = defaultdict(list)
    for row in rows:
        bins[min(int(row.confidence * BINS), BINS - 1)].append(row)
    table, error = [], 0.0
    for index in sorted(bins):
        members = bins[index]
        said = sum(r.confidence for r in members) / len(members)
        right = sum(r.top1 for r in members) / len(members)
        table.append((f"{index / BINS:.0%}-{(index + 1) / BINS:.0%}", len(members), said, right))
        error += len(members) / len(rows) * abs(said - right)
    return table, error


def calibration_report(scored: list[Scored], split: str) -> list[str]:
    """Markdown lines for one half: the share right at >= 80 %, the first three, logs without a cause, the
    expected calibration error and the reliability table."""
    rows = [s for s in scored if s.entry["split"] == split]
    confident = [s for s in rows if s.confidence >= CONFIDENT]
    table, error = reliability(rows)
    lines = [
        f"- answers at >= {CONFIDENT:.0%}: {len(confident)}/{len(rows)}, right {_ratio(confident, 'top1')}",
        f"- right family in the first three causes: {_ratio(rows, 'top3')}",
        "- right family in the first three answers (a group stated as one answer counted as one): "
        f"{_ratio(rows, 'top3_answers')}",
        f"- logs without a cause: {sum(s.empty for s in rows)}",
        f"- expected calibration error (top cause, {BINS} bins): {error:.3f}",
        "",
        "| confidence | logs | mean confidence | right |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {count} | {said:.0%} | {right:.0%} |" for name, count, said, right in table]
    return lines


def calibration_summary(scored: list[Scored]) -> list[str]:
    """Markdown lines: each half's calibration report, the held-out half first."""
    lines = []
    for split in SPLITS:
        name = "dev (leave-one-out prior; the curves were fitted here)" if split == "dev" else split
        lines += [f"### {name}", "", *calibration_report(scored, split), ""]
    return lines


def summary(scored: list[Scored]) -> list[str]:
    """Markdown lines: per split the top-1 family and group, then per kind of log and per family."""
    lines = ["| half | logs | top-1 family | top-1 in the right group |", "|---|---|---|---|"]
    for split in SPLITS:
        rows = [s for s in scored if s.entry["split"] == split]
        name = "dev (leave-one-out prior)" if split == "dev" else split
        lines.append(f"| {name} | {len(rows)} | {_ratio(rows, 'top1')} | {_ratio(rows, 'group_top1')} |")
    lines += ["", "| kind of log | held_out top-1 | held_out group | dev top-1 | dev group |", "|---|---|---|---|---|"]
    kinds: dict[str, list[Scored]] = defaultdict(list)
    for s in scored:
        kinds[s.kind].append(s)
        if s.with_code:
            kinds["with code"].append(s)
        kinds["only the error's lines" if s.only_the_error else "more than the error"].append(s)
    for kind in ("assertion", "frames", "generic", "with code", "only the error's lines", "more than the error"):
        cells = []
        for split in SPLITS:
            rows = [s for s in kinds[kind] if s.entry["split"] == split]
            cells += [_ratio(rows, "top1"), _ratio(rows, "group_top1")]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "| confirmed family | held_out top-1 | dev top-1 |", "|---|---|---|"]
    families: dict[str, list[Scored]] = defaultdict(list)
    for s in scored:
        families[s.entry["family"]].append(s)
    for family, rows in sorted(families.items()):
        cells = [_ratio([s for s in rows if s.entry["split"] == split], "top1") for split in SPLITS]
        lines.append(f"| `{family}` | " + " | ".join(cells) + " |")
    return lines


def scored_corpus() -> list[Scored]:
    """Every log scored as ``main`` scores it (the dev half leave-one-out)."""
    every = entries()
    rows = dev_rows(every)
    return [score(e, rows) for e in every]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-misses", action="store_true", help="list the dev half's misses (never the held-out)")
    parser.add_argument("--dev-halves", action="store_true", help="the dev half's figures in its two fixed halves")
    parser.add_argument("--ceiling", action="store_true", help="the most any diagnosis could score on each half")
    args = parser.parse_args()
    if args.ceiling:
        for split in (*SPLITS, "whole corpus"):
            rows = [e for e in entries() if split in (e["split"], "whole corpus")]
            family, group = ceiling(rows)
            print(
                f"{split}: ceiling top-1 {family}/{len(rows)} = {family / len(rows):.0%}, "
                f"group {group}/{len(rows)} = {group / len(rows):.0%}"
            )
        return
    scored = scored_corpus()
    if args.dev_halves:
        for half in ("look", "check"):
            rows = [s for s in scored if s.entry["split"] == "dev" and dev_half(s.entry) == half]
            generic = [s for s in rows if s.kind == "generic"]
            print(
                f"dev/{half}: top-1 {_ratio(rows, 'top1')}, group {_ratio(rows, 'group_top1')}; "
                f"generic top-1 {_ratio(generic, 'top1')}, group {_ratio(generic, 'group_top1')}"
            )
        return
    if args.dev_misses:
        for s in scored:
            if s.entry["split"] == "dev" and not s.top1:
                print(f"{s.entry['id']:<32} {s.kind:<9} want {s.entry['family']:<28} got {list(s.families[:3])}")
        return
    print("\n".join(calibration_summary(scored) + summary(scored)))


if __name__ == "__main__":
    main()
