"""Training survives the assert, in real kernels: a model trained in one cell, a later cell that poisons the
context, ``%cudaguard restart``; the parameters, the optimizer's and the scheduler's state and the random generators
come back bit for bit as the training cell left them, and the training cell does not run again (it appends to a
file each time it runs). On the simulated GPU the device tensors cannot be read once poisoned, as on a real one; the
same notebook runs on a real GPU under the ``gpu`` mark."""

from __future__ import annotations

import os

import pytest
from kernel_helpers import ENV, run_ok, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = [pytest.mark.kernel]

# The simulated GPU copies through the simulation on the host, 0.3-0.5 ms a tensor: at the default budget (3 % of
# the cells a snapshot protects) a 0.3 s training cell is covered or not by how loaded the machine is. These tests
# are about what comes back; the budget has its own (tests/snapshot/test_snapshot.py).
LOAD = "%load_ext nb_cudaguard\n%config CudaGuard.snapshot_max_fraction = 1.0"

DIGEST = """# cudaguard: skip
import hashlib, random


def digest():
    def h(t):
        return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:20] + str(t.dtype)

    state = opt.state_dict()
    return {
        "params": [h(p) for p in model.parameters()],
        "on_gpu": [p.is_cuda for p in model.parameters()],
        "opt": {k: {n: h(v) if torch.is_tensor(v) else v for n, v in s.items()} for k, s in state["state"].items()},
        "groups": repr(state["param_groups"]),
        "bound": all(a is b for a, b in zip(opt.param_groups[0]["params"], model.parameters())),
        "sched": repr(sched.state_dict()),
        "torch_rng": h(torch.get_rng_state()),
        "cuda_rng": [h(s) for s in torch.cuda.get_rng_state_all()] if not simulated else [],
        "python_rng": hashlib.sha256(repr(random.getstate()).encode()).hexdigest(),
    }
"""


def notebook(counter: str, model_source: str, simulate: bool) -> list[str]:
    return [
        *(["%cudaguard simulate on"] if simulate else []),
        f"import time\nimport torch\nimport random\nsimulated = {simulate}\ntorch.manual_seed(0)\nrandom.seed(0)\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n\n\n"
        f"def note_training():\n    with open({counter!r}, 'a') as log:\n        log.write('trained\\n')",
        model_source,
        "opt = torch.optim.Adam(model.parameters(), lr=1e-2)\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)",
        "x = torch.randn(64, 8).to(device)\ny = torch.randint(0, 4, (64,)).to(device)",
        "for step in range(7):\n"
        "    opt.zero_grad()\n"
        "    loss = torch.nn.functional.cross_entropy(model(x + 0.01 * torch.randn_like(x)), y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    sched.step()\n"
        "jitter = random.random()\n"
        "time.sleep(0.3)  # stands for the rest of a long training run\n"
        "note_training()",
    ]


# Another training step, with labels past the 4 classes: the device-side assert poisons the context.
POISON = (
    "opt.zero_grad()\n"
    "loss = torch.nn.functional.cross_entropy(model(x), torch.full((64,), 7, device=device))\n"
    "loss.backward()\nopt.step()"
)
MODEL = (
    "model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), "
    "torch.nn.Linear(32, 4)).to(device)"
)


def _run_until_poisoned(kernel: KernelSession, cells: list[str]) -> tuple[dict, dict]:
    for cell in cells[:-1]:
        run_ok(kernel, cell)
    run_ok(kernel, DIGEST)
    untrained = value(kernel, "digest()")
    run_ok(kernel, cells[-1], timeout=120)
    trained = value(kernel, "digest()")
    status = run_ok(kernel, "%cudaguard status").stdout
    assert "snapshot: model, opt, sched" in status, status
    failing = kernel.run(POISON)
    assert failing.status == "error" and "device-side assert" in failing.error["evalue"]
    unreadable = kernel.run("model[0].weight.sum().item()")
    assert unreadable.status == "error" and "device-side assert" in unreadable.error["evalue"]
    return untrained, trained


def _restart(kernel: KernelSession, lost: str = "0 failure(s)") -> str:
    """``lost``: what the summary says of the names that did not come back."""
    restart = run_ok(kernel, "%cudaguard restart", timeout=120)
    first = run_ok(kernel, "print('ready')", timeout=180)
    assert lost in first.stdout, first.stdout
    return restart.stdout + first.stdout


def _check_restored(tmp_path, simulate: bool) -> None:
    counter = tmp_path / "trained.log"
    with KernelSession(extra_env=ENV) as kernel:
        run_ok(kernel, LOAD)
        untrained, trained = _run_until_poisoned(kernel, notebook(str(counter), MODEL, simulate))
        assert untrained["params"] != trained["params"] and untrained["opt"] != trained["opt"]
        assert untrained["sched"] != trained["sched"] and untrained["torch_rng"] != trained["torch_rng"]
        assert counter.read_text() == "trained\n"
        trained_jitter = value(kernel, "jitter")

        # the training loop's last loss lived on the GPU: it cannot be carried, and is said; its counters are carried
        said = _restart(kernel, lost="1 name(s) not rebuilt: loss")
        assert "carried jitter beside the snapshot" in said and "carried step beside the snapshot" in said, said
        assert value(kernel, "(step, round(jitter, 12))") == (6, round(trained_jitter, 12))
        assert "skip, restored from the snapshot of cell" in said, said
        assert "restored model, opt, sched from the snapshot" in said, said
        run_ok(kernel, DIGEST)
        assert value(kernel, "digest()") == trained  # bit for bit, bound to the rebuilt parameters, on the GPU
        assert counter.read_text() == "trained\n", said  # the training cell did not run again
        assert value(kernel, "(model.training, model[2].training)") == (True, True)
        excluded = "__import__('nb_cudaguard').get_guard().last_replay.plan.excluded"
        skipped = value(kernel, f"[s.reason for s in {excluded} if s.record.first_line.startswith('for step')]")
        assert len(skipped) == 1 and skipped[0].startswith("skip, restored from the snapshot of cell"), skipped
        # the failing cell now runs with good labels on the restored state
        run_ok(kernel, POISON.replace("torch.full((64,), 7, device=device)", "y"))


def test_training_survives_the_assert_on_the_simulated_gpu(tmp_path):
    _check_restored(tmp_path, simulate=True)


@pytest.mark.gpu
def test_training_survives_a_real_device_assert(tmp_path):
    _check_restored(tmp_path, simulate=False)


def test_a_rebuilt_model_of_another_shape_is_trained_again_and_the_report_says_why(tmp_path):
    """The model's class comes from a file that changed before the restart: the rebuilt model does not fit the
    snapshot, so the training cell runs again (the log has two lines) and the summary says which tensor differs."""
    counter = tmp_path / "trained.log"
    (tmp_path / "nets.py").write_text(
        "import torch\n\n\ndef make(hidden=32):\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4))\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    with KernelSession(extra_env=env) as kernel:
        run_ok(kernel, LOAD)
        cells = notebook(str(counter), "import nets\nmodel = nets.make().to(device)", simulate=True)
        _run_until_poisoned(kernel, cells)
        source = (tmp_path / "nets.py").read_text()
        (tmp_path / "nets.py").write_text(source.replace("hidden=32", "hidden=16"))
        said = _restart(kernel)
        assert "replayed instead of restored: model (0.weight is (16, 8) torch.float32, the snapshot's (32, 8)" in said
        assert "opt (its parameter 0 has shape (16, 8), its exp_avg in the snapshot (32, 8))" in said, said
        assert "sched (trained again by a cell that runs because of another object)" in said, said
        assert counter.read_text() == "trained\ntrained\n"  # it ran again, on the rebuilt model
        assert value(kernel, "tuple(model[0].weight.shape)") == (16, 8)


# As transformers' Trainer: the optimizer, its scheduler (which patches the optimizer's ``step`` on the instance) and
# the bookkeeping are built inside train(); a callback is handed the optimizer, and a weak reference points to the
# batch list train() made. `hook` stands for what cannot be pickled (a closure), set only when asked.
MINI_TRAINER = """import weakref


class Callbacks:
    optimizer = None


class MiniTrainer:
    def __init__(self, model, closure=False):
        self.model, self.callbacks, self.closure = model, Callbacks(), closure

    def train(self):
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        self.callbacks.optimizer = self.optimizer
        batches = [x, x + 1]
        self.last_batches = weakref.ref(self.callbacks)  # reaches an object the rebuilt trainer has again
        self.gone = weakref.ref(type("Batches", (), {})())  # and one that is not kept
        self.global_step = 0
        for batch in batches * 3:
            self.optimizer.zero_grad()
            torch.nn.functional.cross_entropy(self.model(batch), y).backward()
            self.optimizer.step()
            self.scheduler.step()
            self.global_step += 1
        if self.closure:
            self.hook = lambda: self.global_step


def trainer_digest():
    def h(t):
        return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:20]

    state = trainer.optimizer.state_dict()
    return {
        "opt": {k: {n: h(v) if torch.is_tensor(v) else v for n, v in s.items()} for k, s in state["state"].items()},
        "bound": all(a is b for a, b in zip(trainer.optimizer.param_groups[0]["params"], model.parameters())),
        "sched": repr(trainer.scheduler.state_dict()),
        "one optimizer": trainer.scheduler.optimizer is trainer.optimizer,
        "step": trainer.global_step,
        "params": [h(p) for p in model.parameters()],
    }
"""


@pytest.mark.parametrize("closure", [False, True], ids=["kept", "a-closure-not-kept"])
def test_what_train_set_inside_a_trainer_comes_back_in_the_rebuilt_trainer(tmp_path, closure):
    """``trainer.train()`` builds the optimizer and the scheduler inside the trainer: after the restart the training
    cell is skipped, and the rebuilt trainer has them again, bound to the rebuilt model's parameters, bit for bit,
    with its step counter; training goes on from there. An attribute that cannot be pickled keeps them from coming
    back, and the summary says so."""
    counter = tmp_path / "trained.log"
    with KernelSession(extra_env=ENV) as kernel:
        run_ok(kernel, LOAD)
        cells = notebook(str(counter), MODEL, simulate=True)[:2]
        cells += [
            MODEL,
            "x = torch.randn(64, 8).to(device)\ny = torch.randint(0, 4, (64,)).to(device)",
            MINI_TRAINER.replace("import weakref", "import hashlib\nimport weakref"),
            f"trainer = MiniTrainer(model, closure={closure})",
            "trainer.train()\ntime.sleep(0.3)\nnote_training()",
        ]
        for cell in cells:
            run_ok(kernel, cell)
        trained = value(kernel, "trainer_digest()")
        failing = kernel.run("trainer.model(x)[:, torch.full((64,), 7, device=device)].sum()")
        assert failing.status == "error" and "device-side assert" in failing.error["evalue"]
        said = _restart(kernel)
        assert counter.read_text() == "trained\n", said  # not trained again
        if closure:
            assert "starts over" in said, said
            assert value(kernel, "hasattr(trainer, 'optimizer')") is False
            return
        assert "trainer.optimizer" in said and "trainer.scheduler" in said, said
        assert value(kernel, "trainer_digest()") == trained
        assert value(kernel, "trainer.callbacks.optimizer is None and trainer.gone() is None") is True
        assert value(kernel, "trainer.last_batches() is trainer.callbacks") is True
        run_ok(kernel, "trainer.train()")  # and training goes on
        assert value(kernel, "trainer.global_step") == 6
