"""Where transformers is installed: a real tiny BERT classifier with num_labels=2 fed label 2 (built offline)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scenarios"))
import runner

CELLS = [
    """
import torch
from transformers import BertConfig, BertForSequenceClassification

config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
input_ids = torch.randint(5, 100, (4, 10))
labels = torch.tensor([0, 1, 2, 1])
""",
    "outputs = model(input_ids=input_ids, labels=labels)",
]


@pytest.mark.parametrize("form", ["cpu", "cuda"])
def test_real_bert_with_two_labels_fed_label_two(form):
    outcome = runner.run(runner.Scenario(Path("bert.py"), "", "", "", CELLS), form)
    top = outcome.top
    assert top.family == "num_classes_mismatch" and top.variable == "labels"
    assert "num_labels=3" in top.fix
    assert any(e.kind == "config" and "num_labels = 2" in e.text for e in top.evidence)


def test_real_bert_sequence_longer_than_its_positions():
    cells = [CELLS[0], "long_ids = torch.randint(5, 100, (1, 40))", "outputs = model(input_ids=long_ids)"]
    top = runner.run(runner.Scenario(Path("bert.py"), "", "", "", cells), "cpu").top
    # transformers raises a shape error here (its buffered token_type_ids are max_position_embeddings long)
    assert top.family == "position_ids_too_long" and top.variable == "long_ids"
    assert "max_length=32" in top.fix
