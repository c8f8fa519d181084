"""A fast check that fires inside a library's loop (issue 29): the cell names neither the model nor the optimizer
(a ``fit()`` of the user's, as a ``Trainer.train()``), yet both ran on clamped values. The runtime saw the optimizer
step, so the fired error lists them, and ``%cudaguard rerun --rebuild`` puts them back from the last snapshot, in
place and bit for bit, with no restart."""

from __future__ import annotations

import hashlib

import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

from nb_cudaguard import get_guard  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402

SETUP = [
    "%cudaguard simulate on",
    "import time\nimport torch\nimport torch.nn.functional as F\ntorch.manual_seed(0)\ndevice = 'cuda'",
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)\n"
    "opt = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
    "x = torch.randn(32, 8).to(device)\ny = torch.randint(0, 4, (32,)).to(device)",
    "def fit(labels, steps=5):\n"
    "    for _ in range(steps):\n"
    "        opt.zero_grad()\n"
    "        F.cross_entropy(model(x), labels).backward()\n"
    "        opt.step()",
    # trained once, slowly enough that the snapshot is worth its copy
    "fit(y)\ntime.sleep(0.5)",
    "%cudaguard check on",
]


def _digest(shell) -> tuple:
    def h(t):
        return hashlib.sha256(t.detach().cpu().numpy().tobytes()).hexdigest()

    model, opt = shell.user_ns["model"], shell.user_ns["opt"]
    states = opt.state_dict()["state"]
    return tuple(h(p) for p in model.parameters()), tuple(h(v) for s in states.values() for v in s.values())


def test_a_check_fired_in_a_loop_lists_what_it_trained_and_rebuild_restores_it_bit_equal(shell):
    for cell in SETUP:
        assert shell.run_cell(cell, store_history=True).success, cell
    assert "snapshot: model, opt" in get_guard(shell).status()
    before = _digest(shell)
    with capture_output():
        error = shell.run_cell("fit(y + 4)", store_history=True).error_in_exec  # labels past the 4 classes
    assert isinstance(error, FastCheckError), error
    assert {"model", "opt"} <= set(error.changed_names), error.changed_names  # named by what the runtime saw
    assert _digest(shell) != before  # trained on clamped labels
    with capture_output() as said:
        assert shell.run_cell("%cudaguard rerun --rebuild", store_history=True).success
    assert "Restored model, opt as after [" in said.stdout, said.stdout
    assert _digest(shell) == before  # bit for bit, in the same objects
    assert shell.run_cell("fit(y)", store_history=True).success  # the fixed cell trains on
    shell.run_line_magic("cudaguard", "check off")
