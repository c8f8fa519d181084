"""Training written as people write it survives the assert (issue 29): a loop that reads its data in slices moved to
the device, switches ``model.train()``, writes a log and leaves its temporaries; an evaluation cell that moves its
data to the device; a failing cell with a loop of its own. What the runtime observed decides what changed, so the
training cell is restored from its snapshot (not run again), the weights and the optimizer's state are bit-equal,
and every name is back after the restart."""

from __future__ import annotations

import pytest
from kernel_helpers import ENV, run_ok, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = [pytest.mark.kernel]

DIGEST = """# cudaguard: skip
import hashlib


def digest():
    def h(t):
        return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]

    state = opt.state_dict()["state"]
    return [h(p) for p in model.parameters()], {k: {n: h(v) for n, v in s.items()} for k, s in state.items()}
"""


def cells(log: str) -> list[str]:
    return [
        "%cudaguard simulate on",
        # the training below takes a fraction of a second, not an hour: every change is worth its snapshot here,
        # the evaluation cell's too (a few ms, under the copy's own cost: at 1.0 whether it was covered depended on
        # how long it happened to take, and so did the names the restart could rebuild)
        "%config CudaGuard.snapshot_max_fraction = 1e6",
        "import torch\nimport torch.nn as nn\ntorch.manual_seed(0)\n"
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        "train_x = torch.randn(256, 16)\ntrain_y = torch.randint(0, 4, (256,))\n"
        "val_x = torch.randn(64, 16)\nval_y = torch.randint(0, 4, (64,))",
        "model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-2)\nloss_fn = nn.CrossEntropyLoss()\nhistory = []",
        # the training cell: slices moved to the device, train(), a log file, temporaries left behind
        "model.train()\n"
        "bs = 32\n"
        "for epoch in range(3):\n"
        "    for i in range(0, len(train_x), bs):\n"
        "        xb = train_x[i:i + bs].to(device)\n"
        "        yb = train_y[i:i + bs].to(device)\n"
        "        opt.zero_grad()\n"
        "        out = model(xb)\n"
        "        loss = loss_fn(out, yb)\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "    history.append(loss.item())\n"
        f"    with open({log!r}, 'a') as f:\n"
        "        f.write(f'epoch {epoch} {loss.item():.4f}\\n')\n"
        "print(history)",
        # evaluation: the validation data moved to the device, eval()
        "model.eval()\nwith torch.no_grad():\n    val_acc = (model(val_x.to(device)).argmax(1).cpu() == val_y).float().mean().item()\n"
        "print(val_acc)",
    ]


# the failing cell runs a loop of its own; its labels are past the 4 classes
FAILING = (
    "model.train()\n"
    "for i in range(0, 64, 32):\n"
    "    xb = val_x[i:i + 32].to(device)\n"
    "    out = model(xb)\n"
    "    loss = loss_fn(out, (val_y[i:i + 32] + 4).to(device))\n"
    "print(out.shape, loss)"
)


@pytest.mark.parametrize("carry", [True, False], ids=["carry", "no-carry"])
def test_a_training_loop_that_reads_its_data_is_restored_not_run_again(tmp_path, carry):
    log = tmp_path / "train.log"
    with KernelSession(extra_env=ENV) as kernel:
        run_ok(kernel, "%load_ext nb_cudaguard")
        for source in cells(str(log)):
            run_ok(kernel, source, timeout=120)
        run_ok(kernel, DIGEST)
        trained = value(kernel, "digest()")
        names = set(value(kernel, "sorted(n for n in globals() if not n.startswith('_'))"))
        history = value(kernel, "history")
        assert log.read_text().count("epoch") == 3
        failed = kernel.run(FAILING)
        assert failed.status == "error" and "device-side assert" in failed.error["evalue"]
        status = run_ok(kernel, "%cudaguard status").stdout
        assert "snapshot: model, opt" in status, status
        restart = run_ok(kernel, "%cudaguard restart" + ("" if carry else " --no-carry"), timeout=120).stdout
        said = restart + run_ok(kernel, "print('ready')", timeout=180).stdout
        assert "skip, restored from the snapshot of cell" in said, said
        # what only the restored cell bound (its loop's last values) is carried where it can be (numbers), else
        # said (an open file, tensors on the poisoned GPU), never "0 failure(s)"
        # (without carrying, the evaluation cell's val_acc too: the snapshot restores that cell as well)
        carried_not = ["bs", "epoch", "f", "i", "loss", "out", "val_acc", "xb", "yb"]
        temporaries = ["f", "loss", "out", "xb", "yb"] if carry else carried_not
        assert f"{len(temporaries)} name(s) not rebuilt: {', '.join(temporaries[:8])}" in said, said
        assert "failure(s)" not in said, said
        if carry:  # as the restart found them (the failing cell's loop set i), and what the loop appended to
            assert value(kernel, "(bs, epoch, i)") == (32, 2, 0)
            assert value(kernel, "history") == history and len(history) == 3
        assert log.read_text().count("epoch") == 3, "the training cell ran again"
        run_ok(kernel, DIGEST)
        assert value(kernel, "digest()") == trained  # bit for bit
        back = set(value(kernel, "sorted(n for n in globals() if not n.startswith('_'))"))
        assert names - back == set(temporaries), names - back
        lost = "__import__('nb_cudaguard').get_guard().last_replay.lost"
        assert value(kernel, lost) == temporaries
        assert {"train_x", "val_x", "val_y", "history"} <= back
        run_ok(kernel, FAILING.replace("+ 4", "+ 0"))  # the fixed cell runs on the restored state
