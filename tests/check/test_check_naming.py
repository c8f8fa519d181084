"""%%cudacheck names the variable of the user's own cell (issue 15 item 4, issue 17 item 7), tells a NaN cast to an
index from an index out of range, and its finding is narrowed by the user's objects in the diagnosis.

Real IPython shell, real torch ops on real bad inputs, on the simulated GPU (``.to(device)`` as in a notebook).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.testing.globalipapp import start_ipython  # noqa: E402

import nb_cudaguard  # noqa: E402
from nb_cudaguard import CudaCheckError, testing  # noqa: E402
from nb_cudaguard.check.naming import same_values  # noqa: E402
from nb_cudaguard.diagnosis.causes import Diagnosis  # noqa: E402
from nb_cudaguard.diagnosis.checked import combine  # noqa: E402

SETUP = """
import torch
import torch.nn.functional as F
from torch import nn
device = "cuda" if torch.cuda.is_available() else "cpu"
"""


@pytest.fixture
def shell():
    start_ipython()
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)
    ip.run_line_magic("load_ext", "nb_cudaguard")
    nb_cudaguard.get_guard(ip).show_report = "never"
    testing.enable()
    ip.run_cell(SETUP)
    yield ip
    testing.reset()
    ip.run_line_magic("unload_ext", "nb_cudaguard")


def _checked(ip, setup: str, cell: str) -> CudaCheckError:
    assert ip.run_cell(setup).error_in_exec is None
    err = ip.run_cell("%%cudacheck\n" + cell).error_in_exec
    assert isinstance(err, CudaCheckError), err
    return err


def test_the_callers_variable_not_the_forward_parameter(shell) -> None:
    setup = """
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
    def forward(self, tokens):
        return self.emb(tokens)
model = Encoder().to(device)
ids = torch.tensor([[1, 12, 3]], device=device)
"""
    err = _checked(shell, setup, "out = model(ids)")
    assert err.variable == "ids" and err.values == [12] and err.positions == [(0, 1)]
    assert "argument indices (ids)" in str(err)


def test_inline_moves_and_views_name_the_variable_they_start_from(shell) -> None:
    setup = """
labels = torch.tensor([0, 7, 1])
logits = torch.randn(3, 4, device=device)
actions = torch.tensor([0, 2, 5, 1])
q = torch.randn(4, 3, device=device)
counts = torch.zeros(4, 3, device=device)
m = torch.ones(3, 3, device=device)
idx = torch.tensor([0, 4, 2], device=device).unsqueeze(1)
"""
    assert _checked(shell, setup, "F.cross_entropy(logits, labels.to(device))").variable == "labels"
    assert _checked(shell, "", "q.gather(1, actions.to(device).unsqueeze(1))").variable == "actions"
    err = _checked(shell, "", "counts.scatter_add_(0, idx.expand_as(m), m)")
    assert err.variable == "idx" and err.values == [4, 4, 4]


def test_a_dict_entry_passed_into_a_function_is_named_by_its_key(shell) -> None:
    setup = """
batch = {"x": torch.randn(3, 8), "y": torch.tensor([1, 9, 2])}
batch = {key: value.to(device) for key, value in batch.items()}
head = nn.Linear(8, 4).to(device)
def step(model, data):
    return F.cross_entropy(model(data["x"]), data["y"])
"""
    err = _checked(shell, setup, "loss = step(head, batch)")
    assert err.variable == "batch['y']" and err.values == [9]


def test_two_variables_with_the_same_values_name_neither(shell) -> None:
    setup = """
a = torch.tensor([0, 6])
b = a.clone()
x = torch.randn(5, device=device)
"""
    err = _checked(shell, setup, "x.index_select(0, torch.maximum(a, b).to(device))")
    assert err.variable is None and err.values == [6]


def test_same_values_compares_moves_casts_and_broadcasts_but_not_floats_with_ints() -> None:
    base = torch.tensor([[1], [2]])
    assert same_values(base, base.expand(2, 3).clone())
    assert same_values(base.int(), base.reshape(-1))
    assert not same_values(base.float(), base)
    assert not same_values(torch.tensor([1, 3]), torch.tensor([1, 2]))


def test_a_nan_cast_before_the_checks_is_nan_or_inf_not_an_index_out_of_range(shell) -> None:
    setup = """
scores = torch.tensor([0.25, float("nan"), 0.75])
bins = torch.zeros(10, device=device)
idx = (scores * 10).long().to(device)
"""
    err = _checked(shell, setup, "selected = bins[idx]")
    assert err.family == "nan_or_inf" and err.variable == "idx"
    assert err.values == [torch.iinfo(torch.int64).min] and err.positions == [(1,)]
    assert "NaN or inf" in err.problem and "isfinite" in err.fix


def test_a_plain_negative_index_stays_an_index_out_of_range(shell) -> None:
    err = _checked(
        shell, "bins = torch.zeros(10, device=device)\nbad = torch.tensor([1, -11], device=device)", "bins[bad]"
    )
    assert err.family == "advanced_index_out_of_bounds" and err.values == [-11]


def test_the_workspace_narrows_labels_past_a_small_head_to_num_classes_mismatch(shell) -> None:
    setup = """
num_classes = 5
features = torch.randn(10, 6)
targets = torch.arange(10) % num_classes
model = nn.Linear(6, 4).to(device)
"""
    shell.run_cell(setup)
    shell.run_cell("%%cudacheck\nloss = F.cross_entropy(model(features.to(device)), targets.to(device))")
    report = nb_cudaguard.get_guard(shell).last_report
    assert isinstance(report.incident.exception, CudaCheckError)
    top = report.diagnosis.top
    assert report.incident.exception.family == "label_out_of_range"  # what the op's values alone show
    assert (top.family, top.variable, top.confidence) == ("num_classes_mismatch", "targets", 1.0)
    guard = top.evidence[0]
    assert guard.kind == "guard" and guard.values == [4, 4] and guard.positions == [(4,), (9,)]
    assert any("Narrowed from `label_out_of_range`" in note for note in report.diagnosis.notes)


def test_negative_labels_are_never_narrowed_away_from_what_the_values_show(shell) -> None:
    shell.run_cell("logits = torch.randn(3, 4, device=device)\nlabels = torch.tensor([0, -3, 1])")
    shell.run_cell("%%cudacheck\nloss = F.cross_entropy(logits, labels.to(device))")
    top = nb_cudaguard.get_guard(shell).last_report.diagnosis.top
    assert (top.family, top.variable, top.evidence[0].values) == ("negative_label", "labels", [-3])


def _error(family: str, variable: str | None) -> CudaCheckError:
    return CudaCheckError(
        op="aten.embedding", argument="indices", family=family, problem="has 2 value(s) outside [0, 16)",
        values=[16, 17], positions=[(0, 16), (0, 17)], count=2, variable=variable, fix="check fix",
    )  # fmt: skip


def test_combine_keeps_the_check_whole_without_a_partner_of_its_group() -> None:
    from nb_cudaguard.diagnosis.causes import Cause

    other = Cause("bce_input_range", 0.9, "s", "f", [], variable="logits")
    found = combine(_error("embedding_index_out_of_range", "pos"), Diagnosis(causes=[other]), {"x": 1})
    assert [(c.family, c.variable, c.confidence) for c in found.causes] == [
        ("embedding_index_out_of_range", "pos", 1.0)
    ]
    assert found.causes[0].evidence[0].values == [16, 17]


def test_combine_names_the_users_variable_only_when_the_checks_is_not_theirs() -> None:
    from nb_cudaguard.diagnosis.causes import Cause

    partner = Cause("position_ids_too_long", 0.8, "s", "partner fix", [], variable="input_ids")
    inside = combine(_error("position_ids_too_long", "position_ids"), Diagnosis(causes=[partner]), {"input_ids": 1})
    assert inside.causes[0].variable == "input_ids"
    assert inside.causes[0].evidence[0].variable == "position_ids"  # the values are position_ids', and say so
    theirs = combine(_error("position_ids_too_long", "ids"), Diagnosis(causes=[partner]), {"ids": 1})
    assert theirs.causes[0].variable == "ids"
