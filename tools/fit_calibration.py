"""Fit the curve from a top cause's score to how often it is right, on the corpus's dev half only.

    PYTHONPATH=. python tools/fit_calibration.py   # writes nb_cudaguard/data/calibration.json

Each dev log is scored as ``tools/corpus_score.py`` scores it (its prior counted without it), with the engine's raw
scores; the held-out half is neither scored nor read here.
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
    pairs = [(s.raw_confidence, s.top1) for s in (score(e, rows) for e in every if e["split"] == "dev")]
    curve = calibration.fit(pairs)
    OUT.write_text(json.dumps({"fitted_on": f"dev half, {len(pairs)} logs", "points": curve.points}, indent=1) + "\n")
    print(f"{len(curve.points)} points from {len(pairs)} dev logs: {curve.points}")


if __name__ == "__main__":
    main()
