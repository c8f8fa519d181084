"""No note claims what was not seen (issue 31 point 4): a check that stops an op over negative probabilities, or
over BCE inputs above 1, says negative or above 1, and names NaN only where a NaN was read. Through a real IPython
shell on the simulated GPU, the check under ``%%cudacheck`` and the report built from it."""

from __future__ import annotations

import pytest

from nb_cudaguard.errors import CudaCheckError

torch = pytest.importorskip("torch")

SETUP = "import torch\nimport torch.nn.functional as F\n%cudaguard simulate on\n"
CASES = {
    "multinomial over negative scores": (
        "probs = torch.tensor([[0.5, -0.2, 0.7], [0.1, 0.2, -0.3]]).to('cuda')",
        "%%cudacheck\nnext_token = torch.multinomial(probs, 1)",
        "2 negative",
        False,
    ),
    "multinomial over diverged logits": (
        "probs = torch.softmax(torch.tensor([[1.0, float('nan'), 0.0], [0.0, 1.0, 2.0]]), -1).to('cuda')",
        "%%cudacheck\nnext_token = torch.multinomial(probs, 1)",
        "3 NaN",
        True,
    ),
    "BCE over raw scores": (
        "pred, target = torch.tensor([0.2, 1.5, 3.0]).to('cuda'), torch.tensor([0.0, 1.0, 1.0]).to('cuda')",
        "%%cudacheck\nloss = F.binary_cross_entropy(pred, target)",
        "2 above 1",
        False,
    ),
    "BCE over a NaN prediction": (
        "pred, target = torch.tensor([0.2, float('nan'), 0.5]).to('cuda'), torch.tensor([0.0, 1.0, 1.0]).to('cuda')",
        "%%cudacheck\nloss = F.binary_cross_entropy(pred, target)",
        "1 NaN",
        True,
    ),
    "poisson over negative rates": (
        "rates = torch.tensor([1.0, -2.0, 0.5]).to('cuda')",
        "%%cudacheck\ncounts = torch.poisson(rates)",
        "1 negative",
        False,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_the_check_and_its_report_name_nan_only_where_a_nan_was_read(shell, name):
    data, failing, said, nan_read = CASES[name]
    assert shell.run_cell(SETUP + data).error_in_exec is None
    error = shell.run_cell(failing).error_in_exec
    assert isinstance(error, CudaCheckError), error
    assert said in error.problem, error.problem
    assert ("NaN" in error.problem) is nan_read, error.problem
    report = shell.run_line_magic("cudaguard", "report") or ""
    from nb_cudaguard import get_guard

    diagnosis = get_guard().last_report.diagnosis
    claims = [e.text for c in diagnosis.causes for e in c.evidence] + [c.summary for c in diagnosis.causes]
    claims += list(diagnosis.notes)
    if not nan_read:
        assert not any("NaN" in claim for claim in claims), (claims, report)
