"""The report's first sentence (issue 30): the user's variable, its values against the range, what bounds the range,
and the fix, worded from the evidence's values and ranges alone; and the notebook's own name for a loop's batch."""

from __future__ import annotations

import pytest

from nb_cudaguard.panel.headline import CauseLine, EvidenceRow, headline_of


def _cause(*rows: EvidenceRow, variable: str | None = "yb", family: str = "num_classes_mismatch") -> CauseLine:
    return CauseLine(family, variable, "99%", "", "use nn.Linear(256, 196).", rows)


def test_one_value_against_the_layer_that_bounds_it_in_the_notebooks_own_name():
    range_row = EvidenceRow("...", True, "yb", (195,), 1, "[0, 195) or -100 (ignore_index)", "input.shape[1] (classes)")
    layer_row = EvidenceRow("...", False, "yb", (195,), 1, "[0, 195)", "model.classifier.out_features")
    headline = headline_of(_cause(range_row, layer_row), owner="labels")
    assert headline.problem == (
        "`labels` (as `yb` in the failing line) holds 195, outside [0, 195) or -100 (ignore_index): "
        "`model.classifier` has 195 outputs."
    )
    assert headline.fix == "use nn.Linear(256, 196)."


def test_a_count_is_the_count_read_and_the_values_are_examples_of_it():
    row = EvidenceRow("...", False, "mask", (255.0, 255.0, 3.0), 14, "[0, 3)", "logits.shape[1]")
    problem = headline_of(_cause(row, variable="mask")).problem
    assert problem == "`mask` has 14 values outside [0, 3), such as 3, 255: `logits.shape[1]` is 3."


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            EvidenceRow("...", False, "ids", (24,), None, "length <= 16", "model.pos.num_embeddings"),
            "`ids` is 24 long; the model allows length <= 16: `model.pos` has 16 rows.",
        ),
        (
            EvidenceRow("...", False, "types", (2,), 1, "[0, 1)", "bert.token_type_embeddings.num_embeddings"),
            "`ids` holds 2, outside [0, 1): `bert.token_type_embeddings` has 1 row.",
        ),
        (
            EvidenceRow("...", False, "ids", (), None, "int64 (Long)", None),
            "The output layer has fewer units than there are classes in `ids`: it must be int64 (Long).",
        ),
        (
            EvidenceRow("...", False, "n", (60,), 1, "[0, 51)", "log_probs.shape[0] = 50 time steps"),
            "`ids` holds 60, outside [0, 51): the range comes from `log_probs.shape[0] = 50 time steps`.",
        ),
    ],
)
def test_each_kind_of_range_reads_as_a_sentence(row, expected):
    assert headline_of(_cause(row, variable="ids")).problem == expected


def test_without_a_range_the_title_names_the_variable():
    assert headline_of(_cause(variable="probs")).problem == (
        "The output layer has fewer units than there are classes in `probs`."
    )
