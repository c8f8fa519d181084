"""The checks change nothing that runs: same outputs, losses, gradients and dtypes as without it, for a small
transformer LM and a CNN, in training (autograd), CPU autocast (bfloat16) and no_grad inference. It coexists with
other dispatch modes and with torch.compile, and it really checks the backward ops."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from check_models import SmallCNN, TinyLM, cnn_batch, lm_batch, train_step  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from nb_cudaguard import CudaCheckError  # noqa: E402
from nb_cudaguard.check.mode import Checker  # noqa: E402

VOCAB = 50


def _lm():
    torch.manual_seed(0)
    return TinyLM(vocab=VOCAB, d_model=32, layers=2, heads=4, context=16), lm_batch(4, 16, VOCAB)


def _cnn():
    torch.manual_seed(0)
    return SmallCNN(classes=10), cnn_batch(4)


def _run_training(model, data, steps: int, autocast: bool):
    """Losses, final logits, grads (with dtypes) after ``steps`` AdamW steps from a fixed seed."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    torch.manual_seed(123)  # dropout draws the same masks in both runs
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            losses.append(train_step(model, optimizer, *data))
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(data[0]).detach()
    return losses, logits, grads


def _assert_identical(plain, checked) -> None:
    (p_losses, p_logits, p_grads), (g_losses, g_logits, g_grads) = plain, checked
    assert len(p_losses) == len(g_losses)
    for a, b in zip(p_losses, g_losses, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert p_logits.dtype == g_logits.dtype and torch.equal(p_logits, g_logits)
    assert p_grads.keys() == g_grads.keys() and p_grads
    for name in p_grads:
        assert p_grads[name].dtype == g_grads[name].dtype, name
        assert torch.equal(p_grads[name], g_grads[name]), name


@pytest.mark.parametrize("build", [_lm, _cnn], ids=["transformer_lm", "cnn"])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast_bf16"])
def test_training_identical_checked_and_plain(build, autocast: bool) -> None:
    model, data = build()
    twin = copy.deepcopy(model)
    plain = _run_training(model, data, steps=2, autocast=autocast)
    checker = Checker()
    with checker:
        checked = _run_training(twin, data, steps=2, autocast=autocast)
    _assert_identical(plain, checked)
    assert checker.mode.checked["aten.nll_loss_forward"] >= 2
    assert checker.mode.checked["aten.nll_loss_backward"] >= 2
    if build is _lm:
        assert checker.mode.checked["aten.embedding"] >= 4
        assert checker.mode.checked["aten.embedding_dense_backward"] >= 4


@pytest.mark.parametrize("build", [_lm, _cnn], ids=["transformer_lm", "cnn"])
def test_no_grad_inference_identical(build) -> None:
    model, (inputs, _) = build()
    model.eval()  # the transformer takes its fused inference fast path here
    with torch.no_grad():
        plain = model(inputs)
        with Checker():
            checked = model(inputs)
    assert plain.dtype == checked.dtype and torch.equal(plain, checked)


def test_backward_ops_are_checked_through_autograd() -> None:
    """A bad label reached through autograd's own backward op: the checks stop nll_loss_backward."""
    logits = torch.randn(3, 4, requires_grad=True)
    labels = torch.tensor([0, 1, 2])
    loss = torch.nn.functional.cross_entropy(logits, labels)
    labels.data[1] = 9  # a label corrupted between forward and backward, behind autograd's version counter
    with Checker(), pytest.raises(CudaCheckError) as info:
        loss.backward()
    assert info.value.op == "aten.nll_loss_backward"
    assert info.value.values == [9]


class _Counting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_nested_dispatch_modes_keep_working() -> None:
    emb = torch.nn.Embedding(10, 4)
    ids = torch.tensor([1, 2, 3])
    expected = emb(ids)
    outer, inner = _Counting(), _Counting()
    with outer, Checker(), inner:
        result = emb(ids)
        with pytest.raises(CudaCheckError):
            emb(torch.tensor([10]))
    assert torch.equal(result, expected)
    assert "aten.embedding.default" in outer.ops and "aten.embedding.default" in inner.ops
    with Checker(), _Counting() as counting:
        again = emb(ids)
    assert torch.equal(again, expected)
    assert counting.ops == ["aten.embedding.default"]


def test_torch_compile_model_is_checked_not_crashed() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 3))
    compiled = torch.compile(model, backend="aot_eager")
    ids = torch.tensor([1, 2, 9])
    expected = compiled(ids)
    checker = Checker()
    with checker:
        assert torch.allclose(compiled(ids), expected)
        with pytest.raises(CudaCheckError) as info:
            compiled(torch.tensor([1, 10]))
    assert info.value.op == "aten.embedding"
    assert checker.mode.checked["aten.embedding"] >= 1
    assert torch.allclose(compiled(ids), expected)  # and compiled code still works after the checks
