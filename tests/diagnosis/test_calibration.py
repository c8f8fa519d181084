"""The confidences of one report are probabilities of exclusive causes, fitted on the corpus's dev half."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nb_cudaguard.diagnosis import calibration, diagnose
from nb_cudaguard.diagnosis.evidence import prior
from nb_cudaguard.families import TABLE, group_of
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.incident.logparse import incident_from_log
from nb_cudaguard.incident.probe import Health

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


def _dev_diagnoses():
    for entry in entries():
        if entry["split"] == "dev":
            code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
            incident = incident_from_log((CORPUS / entry["log"]).read_text())
            yield entry, incident, diagnose(incident, code=code)


def test_an_answer_resting_on_the_prior_alone_never_reads_above_what_the_prior_supports():
    capped = 0
    for entry, incident, diagnosis in _dev_diagnoses():
        ranking = prior.prior_for(incident)
        for cause in diagnosis.causes:
            if calibration.answer_kind(cause) == "prior":
                assert cause.confidence <= calibration.prior_support(cause, ranking) + 1e-9, (entry["id"], cause)
                capped += 1
    assert capped > 50  # the dev half's prior-only answers: the cap is exercised, not vacuous


LABELS_ONLY = (
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
    "thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    "RuntimeError: CUDA error: device-side assert triggered\n"
)


def test_a_log_that_cannot_tell_wrong_labels_from_a_small_head_says_so_in_one_line_with_the_step_that_decides():
    diagnosis = diagnose(incident_from_log(LABELS_ONLY))
    assert diagnosis.alternatives[:2] == ["label_out_of_range", "num_classes_mismatch"]
    [line] = [n for n in diagnosis.notes if "tells which" in n]
    assert line.startswith("Labels out of range, or a head too small for the classes")
    assert "`--code FILE`" in line and "%%cudacheck" in line
    assert not any("ranked first by a prior" in n for n in diagnosis.notes)  # one line, not two
    # given the code, the line names the step left: the check that reads the values
    coded = diagnose(incident_from_log(LABELS_ONLY), code="import torch\nloss = criterion(model(x), y)\n")
    [line] = [n for n in coded.notes if "tells which" in n]
    assert "--code" not in line and "%%cudacheck" in line


def test_code_that_decides_the_family_leaves_no_alternatives():
    code = "NUM_CLASSES = 11\nhead = nn.Linear(512, 10)\nloss = F.cross_entropy(head(x), y)\n"
    diagnosis = diagnose(incident_from_log(LABELS_ONLY), code=code)
    assert diagnosis.top.family == "num_classes_mismatch"
    assert diagnosis.alternatives == [] and not any("tells which" in n for n in diagnosis.notes)


def test_a_bare_device_side_assert_states_the_likeliest_group_whole_and_that_nothing_names_the_op():
    diagnosis = diagnose(incident_from_log("RuntimeError: CUDA error: device-side assert triggered\n"))
    top = diagnosis.top
    assert len(diagnosis.alternatives) > 1 and diagnosis.alternatives[0] == top.family
    family_rows = [row for row in TABLE if row.group == group_of(top.family)]
    assert {row.name for row in family_rows} <= {c.family for c in diagnosis.causes}  # the group whole
    [line] = [n for n in diagnosis.notes if "nothing here names the op" in n and "prior" in n]
    assert "`--code FILE`" in line
    assert diagnosis.to_dict()["alternatives"] == diagnosis.alternatives


def test_every_family_has_its_few_words():
    assert all(row.short for row in TABLE)


def test_in_a_poisoned_notebook_the_step_that_decides_is_restart_replay_and_diagnose():
    logged = incident_from_log(LABELS_ONLY)
    live = Incident(
        logged.exc_type,
        logged.message,
        "poisoned",
        Health("poisoned", "device-side assert triggered", source="fault_injection"),
        assertions=logged.assertions,
    )
    [line] = [n for n in diagnose(live).notes if "tells which" in n]
    assert "`%cudaguard restart --diagnose` decides" in line and "--code" not in line
