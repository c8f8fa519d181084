"""A value read by ``%%cudacheck`` replaces the ranking in the reports that follow (issue 31 point 4): the cell that
the check stopped, run again without it, poisons the context; its report says what the check read in that cell
(the family, the variable, the offending values), not the prior's ranking of what the device can no longer show.
Through a real IPython shell with the extension loaded and the simulated GPU on."""

from __future__ import annotations

import pytest

from nb_cudaguard.errors import CudaCheckError

torch = pytest.importorskip("torch")

SETUP = """import torch
import torch.nn.functional as F
%cudaguard simulate on
device = torch.device("cuda")
X = torch.randn(8, 4).to(device)
y = torch.arange(8, device=device)  # made on the device: no host copy to read after the assert
model = torch.nn.Linear(4, 5).to(device)"""
FAILING = "loss = F.cross_entropy(model(X), y)"


def _top(shell):
    from nb_cudaguard import get_guard

    report = get_guard().last_report
    return report, report.diagnosis.causes[0]


def test_the_report_of_a_cell_the_check_read_says_what_it_read(shell):
    from nb_cudaguard import testing

    assert shell.run_cell(SETUP).error_in_exec is None
    checked = shell.run_cell("%%cudacheck\n" + FAILING).error_in_exec
    assert isinstance(checked, CudaCheckError) and checked.values == [5, 6, 7]
    _, read = _top(shell)
    shell.run_cell(FAILING)  # the same cell, without the check: the kernel asserts
    assert testing.is_poisoned()
    report, top = _top(shell)
    assert report.incident.classification == "poisoned"
    assert (top.family, top.variable) == (read.family, "y"), report.diagnosis.causes
    guard = next(e for e in top.evidence if e.kind == "guard")
    assert guard.values == [5, 6, 7] and top.confidence >= 0.9
    assert any("Read by the check" in note for note in report.diagnosis.notes), report.diagnosis.notes


def test_the_report_of_a_cell_a_fast_check_fired_in_says_what_it_read(shell):
    from nb_cudaguard import testing
    from nb_cudaguard.check.fast.error import FastCheckError

    assert shell.run_cell(SETUP + "\n%cudaguard check on").error_in_exec is None
    fired = shell.run_cell(FAILING).error_in_exec
    assert isinstance(fired, FastCheckError) and not testing.is_poisoned()
    shell.run_line_magic("cudaguard", "check off")
    shell.run_cell(FAILING)  # the checks off: the kernel asserts
    assert testing.is_poisoned()
    _, top = _top(shell)
    read = next(e for e in top.evidence if e.kind == "guard")  # the fast check reads the first offending value
    assert top.variable == "y" and read.values and set(read.values) <= {5, 6, 7}, top.evidence


def test_a_changed_cell_is_not_answered_by_what_the_check_read_in_another(shell):
    from nb_cudaguard import testing

    assert shell.run_cell(SETUP).error_in_exec is None
    assert isinstance(shell.run_cell("%%cudacheck\n" + FAILING).error_in_exec, CudaCheckError)
    shell.run_cell("z = y + 3\nloss = F.cross_entropy(model(X), z)")
    assert testing.is_poisoned()
    report, top = _top(shell)
    assert not any(e.kind == "guard" for e in top.evidence), report.diagnosis.causes


def test_the_headless_run_reports_what_the_check_read(tmp_path):
    """``nb-cudaguard run``: the checked cell is tagged to let the run go on (raises-exception), the next cell runs
    the same code and poisons the context; the run's JSON says what the check read."""
    import json

    import nbformat

    from nb_cudaguard.cli.main import main

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    checked = nbformat.v4.new_code_cell("%%cudacheck\n" + FAILING)
    checked.metadata["tags"] = ["raises-exception"]
    nb.cells = [nbformat.v4.new_code_cell(SETUP), checked, nbformat.v4.new_code_cell(FAILING)]
    path, report = tmp_path / "checked.ipynb", tmp_path / "r.json"
    nbformat.write(nb, path)
    assert main(["run", str(path), "-o", str(tmp_path / "o.ipynb"), "--json", str(report)]) == 1
    first, later = json.loads(report.read_text())["incidents"]
    assert later["classification"] == "poisoned" and later["causes"][0]["family"] == first["causes"][0]["family"]
    assert later["causes"][0]["evidence"][0]["kind"] == "guard", later["causes"][0]
    assert later["causes"][0]["evidence"][0]["values"] == [5, 6, 7]
