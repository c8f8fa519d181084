"""Carrying CPU values across the restart, in real kernels: what is carried equals the original, what holds
non-CPU memory or shares objects is replayed, and anything that goes wrong falls back to replay."""

from __future__ import annotations

import ast
import os

import pytest

from nb_cudaguard.kernelsession import KernelSession

pytestmark = pytest.mark.kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}


def value(kernel: KernelSession, expression: str):
    result = kernel.run(f"print(repr({expression}))", timeout=60)
    assert result.status == "ok", (expression, result.error, result.stderr)
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def run_ok(kernel: KernelSession, code: str, timeout: float = 60):
    result = kernel.run(code, timeout=timeout)
    assert result.status == "ok", (code, result.error, result.stderr)
    return result


@pytest.fixture
def kernel():
    with KernelSession(extra_env=ENV) as session:
        run_ok(session, "%load_ext nb_cudaguard")
        yield session


NOTEBOOK = [
    "import time\nimport types\nimport numpy as np\nimport torch",
    "time.sleep(1.0)\nrng = np.random.default_rng(0)\n"
    "frame = {'x': rng.random(200_000), 'y': rng.integers(0, 5, 200_000)}",
    "tokenizer = types.SimpleNamespace(vocab={w: i for i, w in enumerate('abcdefg')}, lower=True)",
    "config = {'lr': 0.1, 'layers': [8, 4], 'name': 'run-1'}",
    "features = torch.arange(12.0).reshape(3, 4)",
    "torch.manual_seed(0)\nmodel = torch.nn.Linear(4, 5)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "on_device = torch.ones(3, device='meta')",
    "alias_a = alias_b = [1, 2]",
    "%cudaguard simulate on",
]
FAILING = (
    "out = model(features)\nassert frame['x'].shape[0] and tokenizer.vocab and config and on_device.shape\n"
    "loss = torch.nn.functional.cross_entropy(out, torch.tensor([0, 1, 9]) + alias_a[0] * 0)"
)
SNAPSHOT = (
    "(float(frame['x'].sum()), int(frame['y'].sum()), sorted(tokenizer.vocab.items()), config, "
    "features.tolist(), model.weight.sum().item(), optimizer.param_groups[0]['params'][0] is model.weight, "
    "alias_a is alias_b)"
)


def test_cpu_values_are_carried_equal_and_the_rest_is_replayed(kernel):
    for cell in NOTEBOOK:
        run_ok(kernel, cell)
    before = value(kernel, SNAPSHOT)
    failing = kernel.run(FAILING)
    assert failing.status == "error" and "device-side assert" in failing.error["evalue"]

    dry = run_ok(kernel, "%cudaguard replay --dry-run").stdout
    assert "skip, carried" in dry and "frame" in dry
    assert "on_device: holds a tensor or storage on the meta device" in dry
    assert "shares objects with" in dry

    run_ok(kernel, "%cudaguard restart")
    first = run_ok(kernel, "print('ready')", timeout=120)
    assert "carried" in first.stdout and "0 failure(s)" in first.stdout, first.stdout
    assert value(kernel, SNAPSHOT) == before  # carried values equal; model/optimizer identity rebuilt by replay
    carried = value(kernel, "__import__('nb_cudaguard').get_guard().last_replay.carried")
    assert {"frame", "tokenizer", "config", "features"} <= set(carried)
    assert not {"model", "optimizer", "on_device", "alias_a", "alias_b"} & set(carried)
    replayed = value(kernel, "[r.first_line for r, _ in __import__('nb_cudaguard').get_guard().last_replay.ran]")
    assert not any(line.startswith("time.sleep") for line in replayed)  # the slow loading cell was skipped
    assert any(line.startswith("torch.manual_seed") for line in replayed)
    assert value(kernel, "(type(on_device).__name__, on_device.device.type)") == ("Tensor", "meta")
