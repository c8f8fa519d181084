"""The confidences of one report are probabilities of exclusive causes, fitted on the corpus's dev half."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nb_cudaguard.diagnosis import calibration, diagnose
from nb_cudaguard.incident.logparse import incident_from_log

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from corpus_add import CORPUS, entries


def test_the_causes_of_every_dev_report_add_up_to_at_most_one():
    for entry in entries():
        if entry["split"] != "dev":
            continue
        code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
        causes = diagnose(incident_from_log((CORPUS / entry["log"]).read_text()), code=code).causes
        assert sum(c.confidence for c in causes) <= 1.0 + 1e-9, entry["id"]
        assert all(c.confidence <= causes[0].confidence for c in causes), entry["id"]


def test_the_fit_pools_tied_scores_and_never_falls_as_the_score_rises():
    pairs = [(0.9, True)] * 6 + [(0.9, False)] * 4 + [(0.5, True)] * 2 + [(0.5, False)] * 2 + [(0.1, False)] * 3
    curve = calibration.fit(pairs)
    shares = [share for _, share in curve.points]
    assert shares == sorted(shares)
    assert curve(0.9) < 0.9  # six of ten right at 0.9, shrunk toward the whole: never read as 90 %
    assert len({start for start, _ in curve.points}) == len(curve.points)


def test_the_shipped_curve_says_where_it_was_fitted():
    data = json.loads((Path(calibration.__file__).parents[1] / "data" / "calibration.json").read_text())
    assert data["fitted_on"].startswith("dev half")
