"""What the fast mode's error says when the checked argument was made inside the code the user called: the family
the user's workspace shows (``diagnosis.checked``, as the exact mode's report), and the user's dataset where a
library's loop built the batch. In a real IPython shell, with real models and a real DataLoader."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402

# A library's evaluation loop (as transformers' Trainer.evaluate runs one): the batch is made from a DataLoader over
# the dataset the user handed it, so no variable of the user's holds the labels the loss receives.
_LOOP = """
import torch
import torch.nn.functional as F


def evaluate(model, dataset):
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    losses = []
    for features, labels in loader:
        losses.append(F.cross_entropy(model(features), labels))
    return torch.stack(losses).mean()
"""


@pytest.fixture
def checked(shell):
    shell.run_line_magic("cudaguard", "check on")
    yield shell
    shell.run_line_magic("cudaguard", "check off")


def test_robertas_gather_at_positions_past_its_table_is_a_sequence_too_long(checked) -> None:
    """RoBERTa gathers its token-type buffer at the position ids: that gather's index past the buffer is the
    sequence past ``max_position_embeddings``, and the variable is the user's ids, not the model's internals."""
    pytest.importorskip("transformers")
    checked.run_cell(
        "import torch\nfrom transformers import RobertaConfig, RobertaModel\n"
        "config = RobertaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,\n"
        "                       intermediate_size=32, max_position_embeddings=12, pad_token_id=1)\n"
        "model = RobertaModel(config).eval()\n"
        "ids = torch.randint(3, 40, (2, 20))"
    )
    result = checked.run_cell("with torch.no_grad():\n    hidden = model(input_ids=ids).last_hidden_state")
    err = result.error_in_exec
    assert isinstance(err, FastCheckError), err
    assert (err.op, err.family, err.variable) == ("torch.gather", "position_ids_too_long", "ids"), str(err)
    assert "truncate" in err.fix and "(ids)" in str(err)


def test_a_batch_a_librarys_loop_read_is_named_by_the_users_dataset(checked, tmp_path, monkeypatch) -> None:
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "evalloop_for_test.py").write_text(_LOOP)
    monkeypatch.syspath_prepend(str(library))
    checked.run_cell(
        "import torch\nfrom evalloop_for_test import evaluate\ntorch.manual_seed(0)\n"
        "model = torch.nn.Linear(3, 4)\n"
        "val_ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.tensor([0, 1, 2, 3, 3, 4, 1, 0]))"
    )
    result = checked.run_cell("metrics = evaluate(model, val_ds)")
    sys.modules.pop("evalloop_for_test", None)
    err = result.error_in_exec
    assert isinstance(err, FastCheckError), err
    assert (err.family, err.argument, err.variable, err.values) == ("label_out_of_range", "target", "val_ds", [4])
