"""The fast checks under ``torch.compile``: Dynamo traces them into the graph (no graph break), the compiled
results equal the plain compiled results bit for bit when nothing fires, and a bad input fed to the compiled model
fires the board from inside the compiled code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from check_models import SmallCNN, TinyLM, cnn_batch, lm_batch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402

F = torch.nn.functional


def _loss_and_grads(model, loss_fn, inputs, labels):
    model.zero_grad(set_to_none=True)
    loss = loss_fn(inputs, labels)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _models():
    torch.manual_seed(0)
    lm = TinyLM(vocab=100, d_model=32, layers=1, heads=2, context=16).eval()  # eval: no dropout randomness
    cnn = SmallCNN(classes=10).eval()
    return {"transformer": (lm, lm_batch(4, 16, 100)), "cnn": (cnn, cnn_batch(8))}


@pytest.mark.parametrize("name", ["transformer", "cnn"])
def test_compiled_under_fast_checks_equals_plain_compiled(name: str) -> None:
    model, (inputs, labels) = _models()[name]
    torch._dynamo.reset()
    compiled = torch.compile(model.loss, backend="aot_eager")  # the forward and the loss, one graph
    plain_loss, plain_grads = _loss_and_grads(model, compiled, inputs, labels)
    counters.clear()
    with FastChecker():  # drops the code compiled without the checks: it recompiles with them
        loss, grads = _loss_and_grads(model, compiled, inputs, labels)
    assert sum(counters["graph_break"].values()) == 0
    assert counters["stats"]["unique_graphs"] == 1  # one graph, the checks in it
    assert torch.equal(loss, plain_loss) and all(torch.equal(a, b) for a, b in zip(grads, plain_grads, strict=True))
    eager_loss, eager_grads = _loss_and_grads(model, model.loss, inputs, labels)
    with FastChecker():
        fast_eager_loss, fast_eager_grads = _loss_and_grads(model, model.loss, inputs, labels)
    assert torch.equal(eager_loss, fast_eager_loss)
    assert all(torch.equal(a, b) for a, b in zip(eager_grads, fast_eager_grads, strict=True))


def test_bad_input_fires_from_compiled_code() -> None:
    model, (inputs, labels) = _models()["transformer"]
    torch._dynamo.reset()
    compiled = torch.compile(model.loss, backend="aot_eager")
    counters.clear()
    bad = inputs.clone()
    bad[1, 3] = 100  # one past the vocabulary
    with pytest.raises(FastCheckError) as info, FastChecker():
        compiled(inputs, labels)  # compiled with the checks, nothing fires
        compiled(bad, labels)
    err = info.value
    assert sum(counters["graph_break"].values()) == 0
    assert (err.op, err.family, err.values, err.count) == ("F.embedding", "embedding_index_out_of_range", [100], 1)
    assert err.user_line is not None and "(compiled)" in err.user_line and "check_models.py" in err.user_line
    assert err.positions == [(1 * 16 + 3,)] and err.flat_position  # compiled sizes may be symbolic: flat index


def test_checks_off_recompiles_without_them() -> None:
    model, (inputs, _) = _models()["transformer"]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    bad = inputs.clone()
    bad[0, 0] = 100
    with pytest.raises(FastCheckError), FastChecker():
        compiled(bad)
    with pytest.raises(IndexError):  # the checks are off: the CPU kernel's own error, not a stale checked graph
        compiled(bad)


def test_inductor_compiles_the_checks() -> None:
    """Inductor (a C++ compiler on CPU): the checks become part of the generated kernels, no graph break. The
    graph with the checks is fused differently from the plain one, so the loss agrees to rounding, not bitwise
    (with ``aot_eager``, the same kernels, it is bitwise: see above)."""
    model, (inputs, labels) = _models()["cnn"]
    torch._dynamo.reset()
    compiled = torch.compile(model.loss, backend="inductor")
    plain_loss = compiled(inputs, labels).detach()
    counters.clear()
    bad = labels.clone()
    bad[2] = 10
    with pytest.raises(FastCheckError) as info, FastChecker():
        torch.testing.assert_close(compiled(inputs, labels).detach(), plain_loss, rtol=1e-6, atol=0)
        compiled(inputs, bad)
    assert sum(counters["graph_break"].values()) == 0
    assert info.value.family == "label_out_of_range" and info.value.values == [10]
