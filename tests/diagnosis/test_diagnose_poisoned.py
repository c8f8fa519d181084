"""After poisoning: unreadable values are inferred from shapes, CPU copies and the source, and said so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
import runner  # noqa: E402

SETUP = """
import torch
import nb_cudaguard.testing
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
loader = DataLoader(TensorDataset(torch.randn(6, 8), torch.tensor([0, 1, 2, 3, 1, 0])), batch_size=6)
labels = torch.empty(6, dtype=torch.long, device="meta")  # stands for the GPU copy, unreadable once poisoned
"""


def _run(cells: list[str]):
    scenario = runner.Scenario(Path("inline.py"), "", "", "", cells)
    return runner.run(scenario, "cuda")


def test_unreadable_labels_fall_back_to_a_cpu_copy_and_are_marked_inferred():
    outcome = _run([SETUP, 'nb_cudaguard.testing.poison("label_out_of_range")'])
    report = outcome.report
    assert report.incident.classification == "poisoned"
    top = outcome.top
    assert top.family == "num_classes_mismatch" and top.variable == "labels"
    copy = next(e for e in top.evidence if e.kind == "tensor")
    assert not copy.direct and copy.variable == "loader.dataset.tensors[1]" and copy.values == [3]
    assert "nn.Linear(16, 4)" in top.fix
    assert any("not read" in note for note in report.diagnosis.notes)


def test_without_a_copy_the_cause_is_inferred_from_metadata_and_source():
    loader = "loader = DataLoader(TensorDataset(torch.randn(6, 8), torch.tensor([0, 1, 2, 3, 1, 0])), batch_size=6)"
    setup = SETUP.replace(loader, "num_classes = 4")
    top = _run([setup, 'nb_cudaguard.testing.poison("label_out_of_range")']).top
    assert top.family == "num_classes_mismatch" and top.variable == "labels"
    assert not any(e.direct for e in top.evidence if e.kind == "tensor")
    assert any("num_classes = 4" in e.text for e in top.evidence)


CARNET = """
class CarNet(nn.Module):
    def __init__(self, features, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, features), nn.ReLU())
        self.classifier = nn.Linear(features, num_classes)
    def forward(self, x):
        return self.classifier(self.body(x))
"""
FAIL = "loss = nn.functional.cross_entropy(model(next(iter(loader))[0]), next(iter(loader))[1])"


@pytest.mark.parametrize(
    ("cells", "fix"),
    [
        (  # the class's argument, given a number: the fix names the class and the argument
            [CARNET, "model = CarNet(16, num_classes=3)"],
            "build model with CarNet(num_classes=4) (now `model = CarNet(16, num_classes=3)`)",
        ),
        (  # given positionally, with a constant of the user's that already counts the classes
            [CARNET, "NUM_CLASSES = 4\nmodel = CarNet(16, 3)"],
            "build model with CarNet(num_classes=NUM_CLASSES) (now `model = CarNet(16, 3)`)",
        ),
        (  # given a constant of the user's: the fix is the constant
            [CARNET, "HEAD_SIZE = 3", "model = CarNet(16, num_classes=HEAD_SIZE)"],
            "set HEAD_SIZE = 4 (now `HEAD_SIZE = 3`)",
        ),
        (  # a constant the class reads itself
            [
                "HEAD_SIZE = 3",
                CARNET.replace("nn.Linear(features, num_classes)", "nn.Linear(features, HEAD_SIZE)"),
                "model = CarNet(16, 99)",
            ],
            "set HEAD_SIZE = 4 (now `HEAD_SIZE = 3`)",
        ),
        (  # a number in the layer's own call: the layer, as before
            [CARNET.replace("nn.Linear(features, num_classes)", "nn.Linear(features, 3)"), "model = CarNet(16, 99)"],
            "use nn.Linear(16, 4)",
        ),
    ],
    ids=["argument", "named-count", "constant-argument", "constant-in-class", "literal"],
)
def test_the_fix_names_what_the_user_wrote_to_size_the_head(cells: list[str], fix: str) -> None:
    setup = SETUP.replace("model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))\n", "")
    outcome = _run([setup, *cells, FAIL])
    top = outcome.top
    assert top.family == "num_classes_mismatch", [(c.family, c.fix) for c in outcome.causes]
    assert top.fix == f"The data has 4 classes but model.classifier has 3 outputs: {fix}."
