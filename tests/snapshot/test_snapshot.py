"""Snapshots in a real IPython shell on the simulated GPU: what a cell built and trained, the host copy and its
budgets, what the replay plan may skip, and that the success path reads no device value (after a poisoning, the
hooks go on without touching a single value)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nb_cudaguard import get_guard, testing  # noqa: E402
from nb_cudaguard.replay.plan import build_plan  # noqa: E402
from nb_cudaguard.snapshot.find import find_roots  # noqa: E402
from nb_cudaguard.snapshot.plan import snapshot_plan  # noqa: E402

SETUP = [
    "%cudaguard simulate on",
    "%config CudaGuard.snapshot_max_fraction = 1.0  # the budget has its own test",
    "import torch\ntorch.manual_seed(0)\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'",
    "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)\n"
    "opt = torch.optim.Adam(model.parameters(), lr=1e-2)\n"
    "sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)",
    "x = torch.randn(32, 8).to(device)\ny = torch.randint(0, 4, (32,)).to(device)",
]
TRAIN = (
    "import time\nfor _ in range(4):\n    opt.zero_grad()\n"
    "    loss = torch.nn.functional.cross_entropy(model(x), y)\n    loss.backward()\n    opt.step()\n    sched.step()\n"
    "time.sleep(0.2)"
)
POISON = "torch.nn.functional.cross_entropy(model(x), torch.full((32,), 9).to(device))"


def _run(shell, cells):
    for cell in cells:
        result = shell.run_cell(cell, store_history=True)
        assert result.success, (cell, result.error_in_exec)


def test_a_training_cell_is_seen_as_training_and_its_state_copied_before_the_poisoning(shell):
    _run(shell, [*SETUP, TRAIN])
    snapshots = get_guard().snapshots
    effects = list(snapshots.effects.values())
    assert set(effects[-1].trained) == {"model", "opt", "sched"} and set(effects[-1].constructed) == {"loss"}
    assert {"model", "opt", "sched"} <= set(effects[-3].constructed)
    copy = snapshots.latest()
    assert copy is not None and [r.path for r in copy.roots] == ["model", "opt", "sched", "x", "y", "loss"]
    weight = shell.user_ns["model"][0].weight.detach().cpu()
    moments = shell.user_ns["opt"].state_dict()["state"][0]["exp_avg"].cpu()
    assert not shell.run_cell(POISON).success and testing.is_poisoned()
    with pytest.raises(RuntimeError, match="device-side assert"):
        shell.user_ns["model"][0].weight.sum().item()
    state = {r.path: r.state for r in copy.roots}
    assert torch.equal(state["model"]["tensors"]["0.weight"], weight)  # host memory: readable after the poisoning
    assert torch.equal(state["opt"]["state"][0]["exp_avg"], moments)
    assert state["sched"]["last_epoch"] == 4


def test_the_hooks_read_no_device_value_even_on_a_poisoned_context(shell):
    _run(shell, [*SETUP, TRAIN])
    assert not shell.run_cell(POISON).success
    _run(shell, ["cpu_only = [1, 2, 3]", "more = sum(cpu_only)"])
    guard = get_guard()
    assert guard.snapshot, "a hook read a device value: the poisoned simulation refused it and snapshots went off"
    assert "snapshot: model, opt, sched, x, y" in guard.status()


def test_a_small_fast_change_waits_for_a_slower_cell_and_memory_is_a_budget(shell):
    _run(shell, [*SETUP, "%config CudaGuard.snapshot_max_fraction = 0.0001", "x.add_(1)"])
    snapshots = get_guard().snapshots
    before = snapshots.latest()
    assert before is not None and "is not covered yet" in snapshots.deferred
    _run(shell, ["%config CudaGuard.snapshot_max_fraction = 0.03", "import time\ntime.sleep(0.3)\nx.add_(1)"])
    assert snapshots.latest() is not before and snapshots.deferred == ""
    _run(shell, ["%config CudaGuard.snapshot_max_bytes = 100", "x.add_(1)\ntime.sleep(0.3)"])
    assert "not protected: a snapshot needs" in snapshots.deferred


def test_snapshots_off(shell):
    _run(shell, ["%config CudaGuard.snapshot = False", *SETUP, TRAIN])
    guard = get_guard()
    assert not guard.snapshots.effects and guard.snapshots.latest() is None
    assert "snapshot: off (CudaGuard.snapshot = False)" in guard.status()


def test_state_inside_a_trainer_object_and_a_dict_is_found_once(shell):
    _run(
        shell, [*SETUP, "class Trainer:\n    pass\n\n\ntrainer = Trainer()\ntrainer.model = model\nparts = {'o': opt}"]
    )
    paths = [root.path for root in find_roots(shell.user_ns)]
    assert paths.count("model") == 1 and "trainer.model" not in paths and "opt" in paths
    del shell.user_ns["model"], shell.user_ns["opt"]
    paths = [root.path for root in find_roots(shell.user_ns)]
    assert "trainer.model" in paths and "parts['o']" in paths


@pytest.mark.parametrize(
    ("failing", "skipped"),
    [("opt.zero_grad()\nloss = " + POISON + "\nloss.backward()", True), ("print(loss)\n" + POISON, False)],
    ids=["binds-loss-itself", "reads-the-training-loss"],
)
def test_the_plan_skips_training_unless_a_later_cell_reads_what_it_binds(shell, failing, skipped):
    _run(shell, [*SETUP, TRAIN])
    assert not shell.run_cell(failing, store_history=True).success
    guard = get_guard()
    decided = snapshot_plan(build_plan(guard.journal, "minimal"), guard.journal, guard.snapshots)
    train = guard.journal.last.seq - 1
    if skipped:
        assert decided.skips == {train: ["model", "opt", "sched"]}
        assert decided.row(train).startswith("skip, restored from the snapshot of cell")
    else:
        assert not decided.skips and any("later cells read loss" in note for note in decided.notes), decided.notes


MINI_TRAINER = (
    "class MiniTrainer:  # as transformers' Trainer: the optimizer is built inside train(), bookkeeping kept\n"
    "    def __init__(self, model):\n        self.model, self.global_step = model, 0\n\n"
    "    def train(self):\n        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)\n"
    "        for _ in range(4):\n            self.optimizer.zero_grad()\n"
    "            torch.nn.functional.cross_entropy(self.model(x), y).backward()\n"
    "            self.optimizer.step()\n            self.global_step += 1\n\n"
    "    def evaluate(self, target):\n        return torch.nn.functional.cross_entropy(self.model(x), target).item()\n\n\n"
    "trainer = MiniTrainer(model)"
)


def test_a_trainer_that_builds_its_optimizer_inside_train_is_not_trained_again(shell):
    """``trainer.train()`` changes ``trainer`` (a new optimizer in it, its step counter) and trains ``model``
    through an optimizer no name holds; the failing ``trainer.evaluate()`` reads ``trainer``. The snapshot restores
    the model into the rebuilt trainer; the training cell is skipped, and the plan says the trainer's own
    bookkeeping starts over."""
    _run(shell, [*SETUP, MINI_TRAINER, "import time\ntrainer.train()\ntime.sleep(0.2)"])
    assert not shell.run_cell("trainer.evaluate(torch.full((32,), 9).to(device))", store_history=True).success
    guard = get_guard()
    decided = snapshot_plan(build_plan(guard.journal, "minimal"), guard.journal, guard.snapshots)
    train = guard.journal.last.seq - 1
    assert decided.skips == {train: ["model"]}, decided.notes
    assert any("trainer is rebuilt by its cells and given what" in note for note in decided.notes), decided.notes
