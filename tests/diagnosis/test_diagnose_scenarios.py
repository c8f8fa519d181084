"""Every scenario, on CPU and through the simulated GPU: the top family and the user's variable must be right.

Each scenario runs cell by cell in a real IPython shell with the extension loaded (see scenarios/runner.py), so
the Incident is built by the extension's own post_run_cell hook, from the real exception of a real torch op.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
import runner  # noqa: E402

SCENARIOS = runner.all_scenarios()


def test_there_are_at_least_thirty_scenarios_covering_every_tensor_family():
    families = {s.family for s in SCENARIOS}
    assert len(SCENARIOS) >= 30
    expected = {
        "label_out_of_range", "negative_label", "num_classes_mismatch", "embedding_index_out_of_range",
        "vocab_resize_missing", "position_ids_too_long", "token_type_ids_out_of_range", "bce_input_range",
        "bce_target_range", "gather_scatter_index", "advanced_index_out_of_bounds", "one_hot_num_classes",
        "multinomial_invalid_probs", "nan_or_inf", "ctc_loss", "dtype_mismatch",
    }  # fmt: skip
    assert expected <= families


@pytest.mark.parametrize("form", ["cpu", "cuda"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_top_family_and_variable(scenario, form):
    outcome = runner.run(scenario, form)
    assert outcome.report is not None, "the scenario's last cell did not fail"
    top = outcome.top
    ranked = [(c.family, c.variable, round(c.confidence, 2)) for c in outcome.causes[:3]]
    assert top.family == scenario.family, ranked
    assert top.variable == scenario.variable, ranked
    assert top.fix and top.evidence
    if form == "cuda" and outcome.report.incident.classification == "poisoned":
        assert outcome.report.incident.assertions, "the device assertion on fd 2 was not captured"


def test_value_evidence_carries_positions_range_and_its_source():
    scenario = runner.load(runner.HERE / "s03_linear_195_for_196_classes.py")
    top = runner.run(scenario, "cpu").top
    tensor = next(e for e in top.evidence if e.kind == "tensor")
    assert tensor.direct and tensor.variable == "yb"
    assert tensor.values == [195] and tensor.count == 1 and tensor.positions == [[3]]
    assert tensor.valid_range == "[0, 195)" and tensor.range_source == "model.2.out_features"
    assert "nn.Linear(256, 196)" in top.fix
    assert any(e.kind == "source" and not e.direct and "nn.Linear(256, 195)" in e.text for e in top.evidence)


def test_on_a_poisoned_device_the_values_come_from_the_batch_the_copy_read_and_say_so():
    """``xb, yb = xb.to(device), yb.to(device)``: the loader's host batch is gone from the namespace, but the runtime
    saw the copy (record.copies), so the values are those of the very batch on the device, not of a dataset."""
    scenario = runner.load(runner.HERE / "s03_linear_195_for_196_classes.py")
    outcome = runner.run(scenario, "cuda")
    assert outcome.report.incident.classification == "poisoned"
    top = outcome.top
    assert top.family == "num_classes_mismatch" and top.variable == "yb"
    tensor = next(e for e in top.evidence if e.kind == "tensor")
    assert not tensor.direct and tensor.variable == "yb"
    assert tensor.values == [195] and tensor.positions == [[3]]  # the fourth batch of 64: row 195 is its 4th
    assert "the host tensor yb was copied from" in tensor.text and "yb itself, on cuda:0, was not read" in tensor.text
    assert "cuda:0" in tensor.text and "nn.Linear(256, 196)" in top.fix


def test_inline_expressions_resolve_to_the_variable_they_are_built_from():
    for name, variable in (
        ("s22_gather_index", "actions"),
        ("s23_scatter_index", "idx"),
        ("s04_segmentation_void_255", "mask"),
    ):
        top = runner.run(runner.load(runner.HERE / f"{name}.py"), "cuda").top
        assert top.variable == variable, name
        assert any(e.values for e in top.evidence if e.kind == "tensor"), name


def test_a_nan_cast_to_an_index_is_not_reported_as_a_negative_id():
    top = runner.run(runner.load(runner.HERE / "s25_nan_cast_to_index.py"), "cuda").top
    assert top.family == "nan_or_inf" and top.variable == "idx"
    assert any("scores" in e.text and "NaN" in e.text for e in top.evidence)
    assert "negative" not in top.fix


def test_vocab_resize_fix_names_the_users_objects():
    top = runner.run(runner.load(runner.HERE / "s10_vocab_resize_missing.py"), "cpu").top
    assert top.fix.startswith("model.resize_token_embeddings(len(tokenizer))")
    assert any(e.kind == "tokenizer" and "len(tokenizer) = 66 > 64" in e.text for e in top.evidence)


def test_report_text_shows_the_variable_and_the_fix():
    outcome = runner.run(runner.load(runner.HERE / "s27_bce_raw_linear.py"), "cuda")
    text = outcome.report.to_text()
    assert (
        "Why: Binary cross-entropy" in text and " in logits" in text and "· bce_input_range)" in text
    )  # the family only as its tag
    assert "nn.BCEWithLogitsLoss()" in text


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_after_restart_replay_and_diagnose_every_poisoning_is_pinned(scenario):
    """Issue 15 item 4: where the device was poisoned, the failing cell re-run under %%cudacheck on a healthy
    context (as "Restart, replay & diagnose" does) gives the right family and variable, with the values and their
    positions read by the check itself. A host-side failure poisons nothing, so it needs no restart."""
    from nb_cudaguard import CudaCheckError

    before = runner.run(scenario, "cuda")
    if before.report.incident.classification != "poisoned":
        assert before.report.incident.classification == "not_cuda" and before.rank == 1  # a host-side check
        return
    after = runner.run(scenario, "cuda", check_last=True)
    assert isinstance(after.report.incident.exception, CudaCheckError), "%%cudacheck did not stop the op"
    top = after.top
    assert (top.family, top.variable) == (scenario.family, scenario.variable), after.report.diagnosis.notes
    guard = top.evidence[0]
    assert guard.kind == "guard" and guard.values and guard.positions and top.confidence == 1.0
