"""The fast mode around every cell, in a real IPython shell: the default of ``%cudaguard check on``, the board
read when the cell ends, the error naming what the cell made wrong and the cells that rebuild it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from IPython.core.error import UsageError  # noqa: E402

from nb_cudaguard import CudaCheckError, get_guard  # noqa: E402
from nb_cudaguard.check.fast.board import BOARD  # noqa: E402
from nb_cudaguard.check.fast.cell import installed  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402


@pytest.fixture
def shell(shell):
    """The shared shell (tests/conftest.py: a fresh namespace, the extension loaded), with a few tensors."""
    shell.run_cell("import torch\nimport torch.nn.functional as F\ntorch.manual_seed(0)\nlogits = torch.randn(4, 5)")
    shell.run_cell("labels = torch.tensor([0, 5, 2, 1])")
    yield shell
    shell.run_line_magic("cudaguard", "check off")


def _stack():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return _get_current_dispatch_mode_stack()


def test_check_on_is_fast_and_raises_when_the_cell_ends(shell, capsys) -> None:
    shell.run_line_magic("cudaguard", "check on")
    assert "fast" in capsys.readouterr().out
    assert _stack() == [] and BOARD.active == 1
    result = shell.run_cell("loss = F.cross_entropy(logits, labels)\nafter = loss * 2\nprint('ran to the end')")
    err = result.error_in_exec
    assert isinstance(err, FastCheckError) and isinstance(err, CudaCheckError)
    assert "ran to the end" in capsys.readouterr().out  # the cell ran through: no sync, no exception per op
    assert (err.family, err.variable, err.values, err.positions, err.count) == (
        "label_out_of_range",
        "labels",
        [5],
        [(1,)],
        1,
    )
    assert "line 1: loss = F.cross_entropy(logits, labels)" in err.user_line and "cell [" in err.user_line
    assert err.changed_names == ["after", "loss"]
    message = str(err)
    assert "wrong from this op on" in message and "%%cudacheck" in message
    assert [names for _, names in err.rebuild_cells] == []  # neither name existed before this cell
    ok = shell.run_cell("F.cross_entropy(logits, labels.clamp(max=4))")
    assert ok.error_in_exec is None and torch.equal(
        ok.result, torch.nn.functional.cross_entropy(shell.user_ns["logits"], shell.user_ns["labels"].clamp(max=4))
    )  # the last expression is still shown: Out[n] is its value


def test_rebuild_cells_come_from_the_journal(shell) -> None:
    shell.run_line_magic("cudaguard", "check on")
    shell.run_cell("scores = torch.zeros(3)")
    err = shell.run_cell("scores = scores + F.one_hot(labels, 5).sum(0)[:3]").error_in_exec
    assert isinstance(err, FastCheckError) and err.family == "one_hot_num_classes" and err.variable == "labels"
    assert err.changed_names == ["scores"]
    assert [names for _, names in err.rebuild_cells] == [["scores"]]
    assert "%cudaguard rerun --rebuild re-runs [" in str(err)


def test_exact_option_and_usage(shell) -> None:
    shell.run_line_magic("cudaguard", "check on --exact")
    err = shell.run_cell("F.cross_entropy(logits, labels)").error_in_exec
    assert isinstance(err, CudaCheckError) and not isinstance(err, FastCheckError)
    assert err.op == "aten.nll_loss_forward"
    assert not installed(shell)
    with pytest.raises(UsageError):
        shell.run_line_magic("cudaguard", "check on --fast --sync")
    shell.run_line_magic("cudaguard", "check on --fast")
    assert installed(shell) and not any(t.__class__.__name__ == "CellEnd" for t in shell.ast_transformers)
    nested = shell.run_cell("%%cudacheck\nF.cross_entropy(logits, labels)").error_in_exec
    assert isinstance(nested, CudaCheckError) and not isinstance(nested, FastCheckError)  # exact wins inside
    shell.run_line_magic("cudaguard", "check off")
    assert BOARD.active == 0 and not installed(shell)
    assert type(shell.run_cell("F.cross_entropy(logits, labels)").error_in_exec) is IndexError


def test_a_cell_failing_later_still_reports_the_firing(shell, capsys) -> None:
    shell.run_line_magic("cudaguard", "check on")
    capsys.readouterr()
    result = shell.run_cell("loss = F.cross_entropy(logits, labels)\nraise ValueError('later')")
    assert isinstance(result.error_in_exec, ValueError)
    assert "before this cell failed, a fast check had fired" in capsys.readouterr().err
    assert all(not t.any() for t in BOARD.tensors.values())  # read and cleared: the next cell starts clean
    fired = get_guard(shell).last_fired  # the same choices as a check firing at the end: %cudaguard rerun knows it
    assert fired is not None and isinstance(fired.error, FastCheckError) and fired.error.changed_names == ["loss"]
    assert "raise ValueError('later')" in fired.record.source
    assert shell.run_cell("x = 1").error_in_exec is None
