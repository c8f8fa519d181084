"""An index tensor checked again, unchanged, against the same range reuses the first verdict (``fast.known``). What
must hold: the reuse happens (the same batch or a buffer's view step after step), the op's result is the unchecked
op's, and every case where the values or the rule may differ is checked again: a change in place (through a view
too), memory shared with NumPy (a write there bumps no version), a swapped ``.data``, another range, another view of
the same base, and the next cell after one that fired, in a real shell. Real ops, real bad values.

The verdicts kept are the deferred path's: a CPU index, or a device one copied from the host, is read at once
instead (``fast.readable``), so these tensors are made on the simulated GPU (``nb_cudaguard.testing``), where
nothing says what their values are without reading the device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
F = torch.nn.functional


from nb_cudaguard import testing  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.known import KNOWN  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402


def _error_of(fn) -> FastCheckError | None:
    try:
        with FastChecker():
            fn()
    except FastCheckError as exc:
        return exc
    return None


@pytest.fixture
def gpu():
    """The simulated GPU, on for one test: its tensors' values are only readable through the device."""
    testing.enable()
    yield "cuda"
    testing.reset()


def _reused(fn) -> int:
    before = KNOWN.skipped
    assert _error_of(fn) is None
    return KNOWN.skipped - before


def test_the_same_batch_step_after_step_is_checked_once_and_gives_the_plain_result(gpu) -> None:
    table, logits = torch.randn(10, 3, device=gpu), torch.randn(4, 6, device=gpu)
    ids, labels = torch.tensor([[0, 9], [3, 2]], device=gpu), torch.tensor([0, 5, -100, 2], device=gpu)
    results = []

    def steps() -> None:
        for _ in range(4):
            results.append((F.embedding(ids, table), F.cross_entropy(logits, labels)))

    assert _reused(steps) == 4  # 8 checked calls: each tensor checked twice (kept the second time), then reused
    plain = (F.embedding(ids, table), F.cross_entropy(logits, labels))
    assert all(torch.equal(e, plain[0]) and torch.equal(c, plain[1]) for e, c in results)


def test_a_buffer_sliced_anew_every_forward_is_checked_once_and_another_slice_again(gpu) -> None:
    positions = torch.arange(8, device=gpu).unsqueeze(0)  # a model's position_ids buffer
    table = torch.randn(6, 3, device=gpu)

    def forwards() -> None:
        for _ in range(4):
            F.embedding(positions[:, :6], table)  # a new view object each time

    assert _reused(forwards) == 2
    error = _error_of(
        lambda: [F.embedding(positions[:, :6], table) for _ in range(2)] + [F.embedding(positions[:, :7], table)]
    )
    assert error is not None and error.values == [6]  # the longer slice, at the same address, reaches row 6


def test_a_change_in_place_is_checked_again_through_the_tensor_or_a_view(gpu) -> None:
    table = torch.randn(5, 3, device=gpu)
    ids = torch.tensor([1, 2, 3], device=gpu)

    def through(change) -> FastCheckError | None:
        def cell() -> None:
            F.embedding(ids, table)
            F.embedding(ids, table)  # kept: a second check
            change()
            F.embedding(ids, table)

        ids.copy_(torch.tensor([1, 2, 3], device=gpu))
        return _error_of(cell)

    error = through(lambda: ids.__setitem__(0, 7))
    assert error is not None and error.values == [7]
    error = through(lambda: ids.view(3, 1)[2].fill_(9))
    assert error is not None and error.values == [9]


def test_memory_shared_with_numpy_is_checked_every_time() -> None:
    table = torch.randn(5, 3)
    buffer = np.array([1, 2, 3])
    borrowed = torch.from_numpy(buffer)
    own = torch.tensor([1, 2, 3])

    def cell() -> None:
        for _ in range(2):  # a second check keeps them
            F.embedding(borrowed, table)
            F.embedding(own, table)
        view = own.numpy()  # taken after the first check; a write through it bumps no version counter
        buffer[1], view[2] = 8, 6
        F.embedding(own, table)
        F.embedding(borrowed, table)

    error = _error_of(cell)
    assert error is not None and error.values == [6]  # the first that fired: own, after the write through NumPy


def test_swapped_data_another_range_and_an_inference_tensor_are_checked_again(gpu) -> None:
    small, large = torch.randn(5, 3, device=gpu), torch.randn(10, 3, device=gpu)
    ids = torch.tensor([1, 7], device=gpu)

    error = _error_of(lambda: (F.embedding(ids, large), F.embedding(ids, large), F.embedding(ids, small)))
    assert error is not None and error.values == [7]  # valid for 10 rows, not for 5

    swapped = torch.tensor([1, 2], device=gpu)

    def swap() -> None:
        F.embedding(swapped, small)
        F.embedding(swapped, small)
        swapped.data = torch.tensor([1, 9], device=gpu)  # no version bump: another data pointer
        F.embedding(swapped, small)

    error = _error_of(swap)
    assert error is not None and error.values == [9]

    with torch.inference_mode():
        frozen = torch.tensor([1, 2], device=gpu)
    before = KNOWN.skipped
    assert _error_of(lambda: [F.embedding(frozen, small) for _ in range(3)]) is None
    assert KNOWN.skipped == before  # no version counter: never kept


def test_new_batches_at_the_addresses_of_freed_ones_are_new_to_it(gpu) -> None:
    """A loader's next batch is a new tensor object, often made where a freed one was (once the checks that held it
    were folded): it is not taken for the tensor checked there before, or it would be reused a check too early."""
    table = torch.randn(10, 3, device=gpu)

    def steps() -> None:
        for step in range(400):  # 800 checks: the held ones folded, and their tensors freed, every 256
            batch = torch.tensor([step % 10, 1], device=gpu)
            F.embedding(batch, table)  # checked: noted
            F.embedding(batch, table)  # checked again: kept, not reused (its first check was not the same tensor's)

    assert _reused(steps) == 0


@pytest.fixture
def shell(shell):
    """The shared shell (tests/conftest.py: a fresh namespace, the extension loaded), with a few tensors."""
    shell.run_cell("%cudaguard simulate on")
    shell.run_cell("import torch\nimport torch.nn.functional as F\nlogits = torch.randn(4, 5, device='cuda')")
    yield shell
    shell.run_line_magic("cudaguard", "check off")


def test_the_cell_after_one_that_fired_fires_again_with_the_same_tensor(shell) -> None:
    shell.run_cell(
        "labels = torch.tensor([0, 5, 2, 1], device='cuda')\ngood = torch.tensor([0, 1, 2, 3], device='cuda')"
    )
    shell.run_line_magic("cudaguard", "check on")
    step = "for _ in range(3):\n    F.cross_entropy(logits, good)\n    F.cross_entropy(logits, labels)"
    for _ in range(2):
        err = shell.run_cell(step).error_in_exec
        assert isinstance(err, FastCheckError) and (err.values, err.variable) == ([5], "labels")
    before = KNOWN.skipped
    assert shell.run_cell("for _ in range(3):\n    F.cross_entropy(logits, good)").error_in_exec is None
    assert shell.run_cell("F.cross_entropy(logits, good)").error_in_exec is None
    assert KNOWN.skipped - before == 2  # after a clean cell, its verdict holds in the next
