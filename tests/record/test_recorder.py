"""The journal and the def/use analysis the replay plan relies on."""

from __future__ import annotations

import pytest

from nb_cudaguard.record.cellnames import analyse
from nb_cudaguard.record.journal import Journal, JournalError


def test_journal_is_bounded_by_count_and_bytes():
    journal = Journal(max_cells=5, max_bytes=10_000)
    for n in range(12):
        journal.start(f"x{n} = {n}", n + 1)
    assert len(journal) == 5 and journal.dropped == 7
    assert [c.execution_count for c in journal] == [8, 9, 10, 11, 12]
    big = Journal(max_cells=100, max_bytes=1000)
    for n in range(10):
        big.start("a" * 300, n)
    assert len(big) == 3 and big.dropped == 7


def test_journal_round_trips_through_json():
    journal = Journal()
    cell = journal.start("import torch\nx = torch.ones(3)", 1, cell_id="abc")
    cell.status, cell.duration = "ok", 1.25
    failed = journal.start("y = x[5]", 2)
    failed.status, failed.error = "error", "IndexError: index 5 is out of bounds"
    back = Journal.from_json(journal.to_json())
    assert [(c.seq, c.source, c.status, c.cell_id) for c in back] == [
        (1, "import torch\nx = torch.ones(3)", "ok", "abc"),
        (2, "y = x[5]", "error", None),
    ]
    assert back.by_seq(1).duration == 1.25
    assert back.start("z = 1", 3).seq == 3


@pytest.mark.parametrize(
    "text",
    ["", "not json", '{"format": 99, "cells": []}', '{"format": 1, "cells": [{"seq": "x"}]}', "[1, 2]"],
)
def test_a_corrupt_journal_gives_a_clear_error(text):
    with pytest.raises(JournalError, match="journal"):
        Journal.from_json(text)


def test_names_defined_used_mutated():
    names = analyse(
        "import numpy as np\nfrom torch import nn\n"
        "model = nn.Linear(4, 2)\nitems.append(model)\ncfg['lr'] = lr\ncount += 1\n"
        "del old\nfor i in range(3):\n    total = total + i\n"
    )
    assert {"np", "nn", "model", "count", "i", "total"} <= names.defined
    assert {"items", "cfg"} <= names.mutated
    assert {"items", "cfg", "lr", "count", "total", "old"} - names.deleted <= names.used | {"old"}
    assert names.deleted == {"old"}
    assert "range" not in names.used


def test_functions_read_their_globals_and_comprehensions_keep_their_variables():
    names = analyse(
        "def step(batch):\n    global steps\n    steps = steps + 1\n    return model(batch) * scale\n"
        "squares = [k * k for k in data]\n"
    )
    assert {"step", "squares", "steps"} <= names.defined
    assert {"model", "scale", "data", "steps"} <= names.used
    assert "batch" not in names.used and "k" not in names.used


def test_magics_and_shell_lines_are_side_effects():
    names = analyse("get_ipython().run_line_magic('pip', 'install x')\nget_ipython().system('ls')\n")
    assert names.side_effects == {"magic", "shell"}


def test_syntax_errors_are_reported_not_raised():
    assert analyse("def (:").syntax_error
