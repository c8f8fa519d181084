"""Score the diagnosis on the corpus of real logs, by split, family, group and kind of log.

    PYTHONPATH=. python tools/corpus_score.py              # the figures for both halves
    PYTHONPATH=. python tools/corpus_score.py --dev-misses # what the dev half gets wrong: the only cases to tune on

The held-out half is scored and never listed case by case: rules are changed only by looking at dev misses.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.families import group_of
from nb_cudaguard.incident.logparse import incident_from_log

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
SPLITS = ("held_out", "dev")
_ASSERTION = re.compile(r"Assertion `|Device-side assertion `|Assertion '")
_LIBRARY_FRAME = re.compile(r'File "[^"]*(site-packages|dist-packages|/lib/python)')


@dataclass(frozen=True)
class Scored:
    entry: dict
    kind: str  # "assertion" | "frames" | "generic"
    with_code: bool
    families: tuple[str, ...]  # ranked, as explain gives them
    confidence: float

    @property
    def top1(self) -> bool:
        return self.families[:1] == (self.entry["family"],)

    @property
    def group_top1(self) -> bool:
        return bool(self.families) and group_of(self.families[0]) == group_of(self.entry["family"])


def entries() -> list[dict]:
    return json.loads((CORPUS / "corpus.json").read_text())


def kind_of(log: str) -> str:
    """What the log carries: a device assertion line, library frames of a traceback, or the generic message only."""
    if _ASSERTION.search(log):
        return "assertion"
    if _LIBRARY_FRAME.search(log):
        return "frames"
    return "generic"


def score(entry: dict) -> Scored:
    log = (CORPUS / entry["log"]).read_text()
    code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
    diagnosis = diagnose(incident_from_log(log), code=code)
    top = diagnosis.top
    return Scored(
        entry, kind_of(log), code is not None, tuple(c.family for c in diagnosis.causes), top.confidence if top else 0.0
    )


def _ratio(rows: list[Scored], attribute: str) -> str:
    hits = sum(getattr(row, attribute) for row in rows)
    return f"{hits}/{len(rows)} = {hits / len(rows):.0%}" if rows else "-"


def summary(scored: list[Scored]) -> list[str]:
    """Markdown lines: per split the top-1 family and group, then per kind of log and per family."""
    lines = ["| half | logs | top-1 family | top-1 in the right group |", "|---|---|---|---|"]
    for split in SPLITS:
        rows = [s for s in scored if s.entry["split"] == split]
        lines.append(f"| {split} | {len(rows)} | {_ratio(rows, 'top1')} | {_ratio(rows, 'group_top1')} |")
    lines += ["", "| kind of log | held_out top-1 | held_out group | dev top-1 | dev group |", "|---|---|---|---|---|"]
    kinds: dict[str, list[Scored]] = defaultdict(list)
    for s in scored:
        kinds[s.kind].append(s)
        if s.with_code:
            kinds["with code"].append(s)
    for kind in ("assertion", "frames", "generic", "with code"):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-misses", action="store_true", help="list the dev half's misses (never the held-out)")
    args = parser.parse_args()
    scored = [score(e) for e in entries()]
    if args.dev_misses:
        for s in scored:
            if s.entry["split"] == "dev" and not s.top1:
                print(f"{s.entry['id']:<32} {s.kind:<9} want {s.entry['family']:<28} got {list(s.families[:3])}")
        return
    print("\n".join(summary(scored)))


if __name__ == "__main__":
    main()
