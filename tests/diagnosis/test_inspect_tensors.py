"""Bounded-cost summaries and range checks, and the rule for which values may be read."""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nb_cudaguard.diagnosis import tensors as it  # noqa: E402


def test_summary_is_one_line_with_range_nan_inf_and_values():
    t = torch.tensor([1.0, float("nan"), 3.0, float("inf"), -2.0])
    summary = it.summarize(t)
    text = summary.to_text()
    assert "\n" not in text
    assert text.startswith("[5] float32 cpu min=-2 max=3 nan=1 inf=1")
    labels = it.summarize(torch.tensor([[0, 2], [2, 7]]))
    assert labels.distinct == [0, 2, 7] and labels.distinct_count == 3 and labels.min == 0 and labels.max == 7


def test_large_tensor_is_sampled_through_a_view_and_stays_fast():
    big = torch.zeros(it.EXACT_LIMIT * 4)
    big[123_457] = float("nan")  # off the sample grid: a sample may miss it, and says so
    started = time.perf_counter()
    summary = it.summarize(big)
    elapsed = time.perf_counter() - started
    assert summary.sampled and "(sampled" in summary.to_text()
    assert elapsed < 0.2
    found = it.outside(big, -1.0, 1.0)
    assert found.sampled and found.positions == []


def test_outside_reports_first_positions_values_and_count_respecting_ignore_index():
    labels = torch.tensor([[0, 5, -100], [7, 1, 9]])
    found = it.outside(labels, 0, 5, ignore=-100)
    assert found.count == 3 and found.values == [5, 7, 9]
    assert found.positions == [(0, 1), (1, 0), (1, 2)]
    assert "labels[0, 1]=5" in found.describe("labels")
    arr = it.outside(np.array([0.5, 1.5, -0.1]), 0.0, 1.0, inclusive=True)
    assert arr.count == 2 and arr.positions == [(1,), (2,)]


def test_meta_tensors_are_never_read_and_say_why():
    meta = torch.empty(4, 3, device="meta")
    assert it.readable(meta, "healthy") == (False, "a meta tensor has no values")
    summary = it.summarize(meta, "poisoned")
    assert not summary.readable and "values not read" in summary.to_text()
    assert it.outside(meta, 0, 1) is None


def test_after_a_simulated_poisoning_host_values_are_read_and_device_values_are_never_attempted():
    from nb_cudaguard import testing

    testing.reset()
    testing.enable()
    try:
        host = torch.tensor([0, 4, 1])
        labels = host.to("cuda")
        with pytest.raises(RuntimeError):
            testing.poison("label_out_of_range")
        with pytest.raises(RuntimeError):
            labels.max()  # the user's own reads of the device now fail, as on a poisoned GPU
        summary = it.summarize(labels, "poisoned")
        assert not summary.readable and "poisoned" in summary.why_not and summary.shape == (3,)
        assert summary.to_text() == "[3] int64 cuda:0 (values not read: the CUDA context is poisoned)"
        assert it.outside(labels, 0, 3, health_state="poisoned") is None
        assert testing.refused_reads() == 0  # decided from metadata: no read of the device was even tried
        assert it.summarize(host, "poisoned").max == 4  # the host copy is still readable
    finally:
        testing.reset()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_values_are_read_only_while_the_context_is_healthy():
    t = torch.tensor([1, 2, 3], device="cuda")
    assert it.readable(t, "healthy")[0]
    assert not it.readable(t, "poisoned")[0]
    assert it.summarize(t, "healthy").max == 3
