"""record.copies: the host tensor each device tensor was copied from, as the runtime saw the copy.

The copies go to the meta device here (a device that is not the host, with no values at all, like a poisoned GPU);
tests/diagnosis and tests/sessions follow them to a report on the simulated GPU.
"""

from __future__ import annotations

import gc

import pytest

from nb_cudaguard.record.copies import COPIES, HELD_LIMIT

torch = pytest.importorskip("torch")


@pytest.fixture
def copies():
    COPIES.install()
    yield COPIES
    COPIES.uninstall()


def test_a_copy_to_a_device_keeps_its_host_batch_after_the_name_is_rebound(copies):
    labels = torch.cat([torch.tensor([1, 2]), torch.tensor([3, 10])])[torch.tensor([3, 0, 2, 1])]
    yb = labels.to("meta")
    del labels  # the loop's name now holds the device copy: only the copy still knows the host batch
    gc.collect()
    assert copies.source_of(yb).tolist() == [10, 1, 3, 2]
    assert copies.source_of(yb[1:3]).tolist() == [1, 3]  # a view of the copy is the same view of its source
    assert copies.source_of(yb.view(2, 2)).tolist() == [[10, 1], [3, 2]]


def test_a_write_in_place_on_either_side_ends_the_copy_s_word(copies):
    labels = torch.tensor([1, 2, 3])
    yb = labels.to("meta")
    yb.sub_(1)  # the device now holds other values than the host batch
    assert copies.source_of(yb) is None and copies.source_of(yb[:2]) is None
    ids = torch.tensor([4, 5])
    on_device = ids.to("meta")
    ids[0] = 0  # the host batch was changed after the copy
    assert copies.source_of(on_device) is None


def test_cuda_and_to_with_keywords_are_seen_and_host_copies_are_not(copies):
    ids = torch.tensor([[5, 7]])
    assert copies.source_of(ids.to(device="meta", non_blocking=True)) is ids
    assert copies.source_of(ids.to(torch.float32)) is None and copies.source_of(ids.clone()) is None


def test_an_entry_goes_with_its_device_tensor_and_floats_are_held_weakly(copies):
    before = len(copies)
    yb = torch.arange(8).to("meta")
    held = copies.held
    assert len(copies) == before + 1 and held >= 64
    del yb
    gc.collect()
    assert len(copies) == before and copies.held == held - 64
    scores = torch.rand(4)
    on_device = scores.to("meta")
    assert copies.source_of(on_device) is scores
    del scores
    gc.collect()
    assert copies.source_of(on_device) is None  # a float source lives only as long as the user keeps it
    big = torch.zeros(HELD_LIMIT + 1, dtype=torch.int8)
    assert copies.source_of(big.to("meta")) is big and copies.held == held - 64


def test_unwrapped_after_uninstall():
    original = torch.Tensor.to
    COPIES.install()
    assert torch.Tensor.to is not original and torch.Tensor.to.__wrapped__ is original
    COPIES.uninstall()
    assert torch.Tensor.to is original and len(COPIES) == 0
