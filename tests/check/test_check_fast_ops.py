"""The fast mode against the exact mode's own cases (tests/check/test_check_ops.py): the same real bad inputs must fire
the board with the same family and variable (and the same first offending value, position and count), and at the
valid boundary nothing may fire and the result must be identical to the unchecked op's.

The exact mode also checks backward ops called directly (``aten.embedding_dense_backward(...)``). The fast mode
has no entry point there: autograd saves the safe values the forward ran on, so the backward kernels see them.
Those cases are exercised through their real route, a forward and ``backward()`` (``BACKWARD_ROUTES``).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from test_check_ops import CASES, _same, _values_equal  # noqa: E402

from nb_cudaguard import CudaCheckError  # noqa: E402
from nb_cudaguard.check.fast.board import BOARD  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402

# Exact-mode cases that call a backward op directly: no Python entry point exists for the fast mode to check.
DIRECT_BACKWARD = {
    "embedding_dense_backward",
    "embedding_bag_backward",
    "nll_loss_backward",
    "nll_loss2d_backward",
    "bce_backward",
    "ctc_backward",
}
# Known on the host (a class-weight vector of the wrong size): raised at once, as in the exact mode.
HOST_RAISED = {"class_weight_size"}


def _run_fast(fn):
    """Run ``fn`` under the fast checks; return (its result, the error raised at the end or None)."""
    result, error = None, None
    try:
        with FastChecker():
            result = fn()
    except CudaCheckError as exc:
        error = exc
    return result, error


@pytest.mark.parametrize("name", sorted(set(CASES) - DIRECT_BACKWARD))
def test_fast_fires_like_exact(name: str) -> None:
    case = CASES[name]
    _, err = _run_fast(case.bad)
    assert err is not None, "the fast checks must fire on the exact mode's bad input"
    assert isinstance(err, RuntimeError)
    assert err.family == case.family
    assert err.argument == case.argument
    if case.variable is not None:
        assert err.variable is not None and err.variable.split(" ")[0] == case.variable
    if name in HOST_RAISED:
        assert not isinstance(err, FastCheckError)
        return
    assert isinstance(err, FastCheckError)
    assert err.count == case.count
    assert _values_equal(err.values[:1], case.values[:1]), err.values
    assert [tuple(p) for p in err.positions[:1]] == case.positions[:1]
    assert case.valid_range in err.valid_range
    assert err.user_line is not None and "test_check_ops.py" in err.user_line
    if case.line is not None:
        assert case.line in err.user_line
    assert "wrong from this op on" in str(err) and "%%cudacheck" in str(err)


@pytest.mark.parametrize("name", sorted(set(CASES) - DIRECT_BACKWARD))
def test_fast_valid_boundary_is_identical(name: str) -> None:
    case = CASES[name]
    plain = case.good()
    checked, err = _run_fast(case.good)
    assert err is None, str(err)
    assert _same(plain, checked)


def _bad_ids():
    return torch.tensor([1, 10, 3])


def route_embedding():
    torch.manual_seed(0)
    table = torch.nn.Embedding(10, 4)
    token_ids = _bad_ids()
    table(token_ids).sum().backward()
    return table.weight.grad


def route_bag():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
    bag_ids = _bad_ids()
    bag(bag_ids, torch.tensor([0, 2])).sum().backward()
    return bag.weight.grad


def route_nll():
    log_probs = torch.randn(2, 3).log_softmax(-1).requires_grad_()
    target = torch.tensor([0, 3])
    F.nll_loss(log_probs, target).backward()
    return log_probs.grad


def route_nll2d():
    log_probs = torch.randn(1, 3, 2, 2).log_softmax(1).requires_grad_()
    target = torch.tensor([[[0, 1], [3, 2]]])
    F.nll_loss(log_probs, target).backward()
    return log_probs.grad


def route_bce():
    probs = torch.tensor([0.2, 0.9], requires_grad=True)
    mask = torch.tensor([0.0, 2.0])
    F.binary_cross_entropy(probs, mask).backward()
    return probs.grad


def route_ctc():
    log_probs = torch.arange(60.0).reshape(6, 2, 5).div(17).log_softmax(2).requires_grad_()
    labels = torch.tensor([[1, 9], [3, 4]])
    F.ctc_loss(log_probs, labels, torch.tensor([6, 6]), torch.tensor([2, 2])).backward()
    return log_probs.grad


BACKWARD_ROUTES = {
    "embedding_dense_backward": (route_embedding, "embedding_index_out_of_range", "token_ids", 10),
    "embedding_bag_backward": (route_bag, "embedding_index_out_of_range", "bag_ids", 10),
    "nll_loss_backward": (route_nll, "label_out_of_range", "target", 3),
    "nll_loss2d_backward": (route_nll2d, "label_out_of_range", "target", 3),
    "bce_backward": (route_bce, "bce_target_range", "mask", 2.0),
    "ctc_backward": (route_ctc, "ctc_loss", "labels", 9),
}


def test_every_direct_backward_case_has_a_route() -> None:
    assert set(BACKWARD_ROUTES) == DIRECT_BACKWARD


@pytest.mark.parametrize("name", sorted(BACKWARD_ROUTES))
def test_backward_runs_on_the_safe_values(name: str) -> None:
    route, family, variable, value = BACKWARD_ROUTES[name]
    if name != "ctc_backward":  # unchecked, the CPU kernels refuse these inputs (CTC's read out of bounds)
        with pytest.raises((IndexError, RuntimeError)) as info:
            route()
        assert not isinstance(info.value, CudaCheckError)
    grad, err = _run_fast(route)
    assert isinstance(err, FastCheckError) and err.family == family and err.variable == variable
    assert err.values[0] == value
    assert grad is not None and bool(torch.isfinite(grad).all())  # the backward ran, on the safe values


def test_board_is_clean_and_entry_points_restored_after_each_block() -> None:
    _run_fast(CASES["embedding"].bad)
    assert BOARD.active == 0 and all(not t.any() for t in BOARD.tensors.values())
    assert F.embedding.__module__ == "torch.nn.functional"
    assert torch.Tensor.__getitem__ is torch._C.TensorBase.__getitem__
    assert "gather" not in vars(torch.Tensor)


def test_first_firing_sticks_and_later_ones_change_nothing() -> None:
    def two_bad_ops():
        table = torch.nn.Embedding(4, 2)
        first = torch.tensor([0, 9])
        table(first)
        logits = torch.randn(2, 3)
        second = torch.tensor([7, -1])
        return F.cross_entropy(logits, second)

    _, err = _run_fast(two_bad_ops)
    assert isinstance(err, FastCheckError)
    assert (err.op, err.variable, err.values, err.count) == ("F.embedding", "first", [9], 1)


def test_nan_first_value_and_exact_mode_suspends_fast() -> None:
    from nb_cudaguard.check.mode import Checker

    _, err = _run_fast(CASES["bce_input_nan"].bad)
    assert isinstance(err, FastCheckError) and math.isnan(err.values[0])
    # the exact mode inside the fast one: it sees the real values and stops the op itself
    with FastChecker(), pytest.raises(CudaCheckError) as info, Checker():
        CASES["cross_entropy"].bad()
    assert not isinstance(info.value, FastCheckError)
