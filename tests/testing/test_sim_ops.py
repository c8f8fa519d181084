"""One bad input per row of the simulation's op table (nb_cudaguard/testing/kernels.py), on the simulated device.

Each row says what CUDA does with that input: a device assert (the line is printed, the error is CUDA's and the
context is poisoned) or a host-side check (the same error as the CPU's, and the context survives). The inputs
are put on the device the way a notebook does (``.to(device)``), and nothing here reads a device value after a
poisoning.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nb_cudaguard import testing  # noqa: E402
from nb_cudaguard.testing import kernels  # noqa: E402


def _gpu(t):
    return t.to("cuda")


EXAMPLES = {
    "nll_target_out_of_range": lambda: F.cross_entropy(_gpu(torch.randn(3, 4)), _gpu(torch.tensor([0, 1, 4]))),
    "nll_target_out_of_range_no_reduce": lambda: F.cross_entropy(
        _gpu(torch.randn(3, 4)), _gpu(torch.tensor([0, 1, 4])), reduction="none"
    ),
    "nll2d_target_out_of_range": lambda: F.cross_entropy(_gpu(torch.randn(2, 3, 4, 4)), _gpu(torch.full((2, 4, 4), 3))),
    "nll_float_target": lambda: F.cross_entropy(_gpu(torch.randn(3, 4)), _gpu(torch.tensor([0.0, 1.0, 3.0]))),
    "embedding_index_out_of_range": lambda: F.embedding(_gpu(torch.tensor([10])), _gpu(torch.randn(10, 2))),
    "embedding_float_ids": lambda: F.embedding(_gpu(torch.tensor([1.0])), _gpu(torch.randn(10, 2))),
    "index_add_out_of_range": lambda: _gpu(torch.zeros(5)).index_add_(0, _gpu(torch.tensor([5])), _gpu(torch.ones(1))),
    "advanced_index_out_of_bounds": lambda: _gpu(torch.randn(5))[_gpu(torch.tensor([5]))],
    "integer_index_out_of_bounds": lambda: _gpu(torch.randn(5))[7],
    "take_out_of_range": lambda: _gpu(torch.randn(5)).take(_gpu(torch.tensor([5]))),
    "gather_scatter_out_of_bounds": lambda: _gpu(torch.randn(2, 3)).gather(1, _gpu(torch.tensor([[3], [0]]))),
    "scatter_value_out_of_bounds": lambda: _gpu(torch.zeros(2, 3)).scatter_(1, _gpu(torch.tensor([[3], [0]])), 1.0),
    "gather_scatter_shape": lambda: _gpu(torch.randn(2, 3)).gather(1, _gpu(torch.tensor([3, 0]))),
    "one_hot_class_out_of_range": lambda: F.one_hot(_gpu(torch.tensor([0, 3])), 3),
    "bce_input_range": lambda: F.binary_cross_entropy(_gpu(torch.tensor([1.5])), _gpu(torch.tensor([1.0]))),
    "bce_target_range": lambda: F.binary_cross_entropy(_gpu(torch.tensor([0.5])), _gpu(torch.tensor([2.0]))),
    "multinomial_invalid_probs": lambda: torch.multinomial(_gpu(torch.tensor([[0.5, float("nan")]])), 1),
    "multinomial_zero_sum": lambda: torch.multinomial(_gpu(torch.tensor([[0.0, 0.0]])), 1),
    "multinomial_replacement_negative": lambda: torch.multinomial(_gpu(torch.tensor([[0.5, -1.0]])), 3, True),
    "multinomial_replacement_zero_sum": lambda: torch.multinomial(_gpu(torch.tensor([[0.0, 0.0]])), 3, True),
    "ctc_input_lengths": lambda: F.ctc_loss(
        _gpu(torch.randn(5, 1, 4).log_softmax(2)), _gpu(torch.tensor([[1, 2]])), torch.tensor([6]), torch.tensor([2])
    ),
    "embedding_bag_index": lambda: F.embedding_bag(
        _gpu(torch.tensor([10])), _gpu(torch.randn(10, 2)), _gpu(torch.tensor([0]))
    ),
}


@pytest.fixture
def simulated():
    testing.reset()
    testing.enable()
    yield
    testing.reset()


def test_every_row_has_an_example_and_cites_both_sides():
    assert sorted(EXAMPLES) == sorted(r.name for r in kernels.ROWS)
    for row in kernels.ROWS:
        assert row.cpu.startswith("aten/src/ATen/") and ":" in row.cpu, row.name
        assert row.cuda.startswith("aten/src/ATen/"), row.name


@pytest.mark.parametrize("row", kernels.ROWS, ids=[r.name for r in kernels.ROWS])
def test_each_row_answers_what_cuda_answers(row, simulated, capfd):
    with pytest.raises((RuntimeError, IndexError)) as raised:
        EXAMPLES[row.name]()
    printed = capfd.readouterr().err
    if row.assert_ is not None:
        assert testing.is_poisoned(), "CUDA has a device assert here: the context must be poisoned"
        assert "device-side assert triggered" in str(raised.value)
        assert kernels.assertion_line(row.assert_, 0) in printed
    else:
        assert not testing.is_poisoned(), "CUDA checks this on the host: the context survives"
        assert "device-side assert" not in str(raised.value) and "Assertion" not in printed
        import re

        assert re.search(row.cpu_error, str(raised.value))


def test_one_hot_poisons_on_the_device_but_not_on_the_host(simulated):
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(torch.tensor([0, 3]), 3)  # a CPU tensor: Onehot.cpp's host check
    assert not testing.is_poisoned()
    with pytest.raises(RuntimeError, match="device-side assert"):
        F.one_hot(torch.tensor([0, 3]).to("cuda"), 3)
    assert testing.is_poisoned()


def test_device_idiom_picks_the_simulated_device_and_values_stay_on_the_host(simulated):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert device == "cuda" and torch.cuda.device_count() == 1
    host = torch.tensor([0, 5, 1])
    labels = host.to(device)
    model = torch.nn.Linear(3, 2).to(device)
    assert labels.device.type == "cuda" and labels.is_cuda and labels.get_device() == 0
    assert model.weight.is_cuda and model(torch.randn(1, 3, device=device)).is_cuda
    assert not host.is_cuda and testing.on_device(labels) and not testing.on_device(host)
    assert "device='cuda:0'" in repr(labels)
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        labels.numpy()
    assert labels.cpu().tolist() == [0, 5, 1] and not labels.cpu().is_cuda  # healthy: copies come back


def test_after_poisoning_device_values_are_refused_and_metadata_and_host_values_are_not(simulated):
    host = torch.tensor([0, 5, 1])
    labels = host.to("cuda")
    with pytest.raises(RuntimeError, match="device-side assert"):
        F.cross_entropy(torch.randn(3, 4).to("cuda"), labels)
    for read in (
        labels.item if labels.numel() == 1 else (lambda: labels[0].item()),
        labels.tolist,
        labels.cpu,
        lambda: repr(labels),
        lambda: bool((labels > 0).any()),
        lambda: labels.to("cpu"),
        lambda: torch.zeros(1, device="cuda"),
        lambda: host.to("cuda"),
        torch.cuda.synchronize,
    ):
        with pytest.raises(RuntimeError, match="device-side assert"):
            read()
    assert labels.shape == (3,) and labels.dtype == torch.int64 and labels.device.type == "cuda"
    assert host.tolist() == [0, 5, 1] and int(host.max()) == 5  # the host's memory is not the GPU's


def test_the_extensions_reads_are_refused_like_the_users_and_counted(simulated):
    from nb_cudaguard.incident.probe import internal_use

    labels = torch.tensor([0, 5, 1]).to("cuda")
    with pytest.raises(RuntimeError):
        testing.poison("label_out_of_range")
    with internal_use(), pytest.raises(RuntimeError, match="device-side assert"):
        labels.max()
    assert testing.refused_reads() == 1
