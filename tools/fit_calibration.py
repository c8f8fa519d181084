"""Fit the curves from a top cause's score to how often it is right, one per kind of answer, on the dev half only.

    PYTHONPATH=.:tools python tools/fit_calibration.py   # writes nb_cudaguard/data/calibration.json

Each dev log is scored as ``tools/corpus_score.py`` scores it (its prior counted without it), with the engine's raw
scores; the held-out half is neither scored nor read here. Each kind's blocks are shrunk toward the dev half's share
right over all kinds, not the kind's own: the rules that narrow a family were written on these logs, so a kind's
own share runs higher than it will elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus_add import entries
from corpus_score import dev_rows, score

from nb_cudaguard.diagnosis import calibration

OUT = Path(__file__).resolve().parent.parent / "nb_cudaguard" / "data" / "calibration.json"


def main() -> None:
    every = entries()
    rows = dev_rows(every)
    scored = [score(e, rows) for e in every if e["split"] == "dev"]
    overall = sum(s.top1 for s in scored) / len(scored)
    curves = {}
    for kind in calibration.KINDS:
        pairs = [(s.raw_confidence, s.top1) for s in scored if s.answer_kind == kind]
        curves[kind] = calibration.fit(pairs, overall).points
        print(f"{kind}: {len(pairs)} dev logs, {sum(r for _, r in pairs)} right: {curves[kind]}")
    fitted = f"dev half, {len(scored)} logs; blocks shrunk by {calibration.SHRINK:g} logs toward {overall:.3f}"
    OUT.write_text(json.dumps({"fitted_on": fitted, "curves": curves}, indent=1) + "\n")


if __name__ == "__main__":
    main()
