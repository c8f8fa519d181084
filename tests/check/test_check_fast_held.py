"""The fast checks' held folds (``Board.defer``): a check's verdict is taken at once, its fold into the board waits
for the cell's end or for ``HOLD_ENTRIES`` more checks. What must not change because of that: the first check that
fired is the one reported, with its own count, position and value, across any number of held windows; an input
changed in place before its fold is never reported with the value it holds by then; what cannot be held (an input
made under ``torch.inference_mode``, an input larger than ``HOLD_ELEMENTS``) is folded at once; a valid cell leaves
nothing behind. Real ops, real bad inputs.

Every tensor here is made on the simulated GPU (``nb_cudaguard.testing``, torch's default device ``cuda``): a CPU
index, or a device one copied from the host, found valid is read at once and never held (``fast.readable``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nb_cudaguard import testing  # noqa: E402
from nb_cudaguard.check.fast.board import BOARD, HOLD_ELEMENTS, HOLD_ENTRIES  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402

GPU = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def _on_the_gpu():
    testing.enable()
    torch.set_default_device("cuda")
    yield
    torch.set_default_device(None)
    testing.reset()


def _error_of(fn) -> FastCheckError | None:
    try:
        with FastChecker():
            fn()
    except FastCheckError as exc:
        return exc
    return None


def test_the_first_check_that_fired_is_reported_across_held_windows() -> None:
    table = torch.randn(5, 3)
    logits = torch.randn(4, 6)
    good_ids, bad_ids = torch.tensor([[0, 4], [1, 2]]), torch.tensor([[0, 9], [1, 2]])
    bad_labels = torch.tensor([0, 1, 7, 2])

    def cell() -> None:
        for step in range(3 * HOLD_ENTRIES):  # three windows of held folds, and then some
            F.embedding(bad_ids if step == 5 else good_ids, table)
            if step == 2 * HOLD_ENTRIES + 1:
                F.cross_entropy(logits, bad_labels)  # fires too, later: must not win

    error = _error_of(cell)
    assert error is not None and error.family == "embedding_index_out_of_range"
    assert error.count == 1 and error.values == [9] and [tuple(p) for p in error.positions] == [(0, 1)]
    assert "9 at [0, 1]" in str(error)


def test_a_later_check_fires_when_the_first_window_was_clean() -> None:
    table, logits = torch.randn(5, 3), torch.randn(4, 6)

    def cell() -> None:
        for _ in range(HOLD_ENTRIES + 3):
            F.embedding(torch.tensor([1, 2]), table)
        F.cross_entropy(logits, torch.tensor([0, -3, 7, 2]))  # held at the cell's end

    error = _error_of(cell)
    assert error is not None and error.family == "negative_label"
    assert error.count == 2 and error.values == [-3] and [tuple(p) for p in error.positions] == [(1,)]


def test_a_buffer_changed_in_place_before_its_fold_is_not_reported_with_its_new_value() -> None:
    table = torch.randn(5, 3)
    buffer = torch.tensor([1, 7, 2])

    def cell() -> None:
        F.embedding(buffer, table)
        buffer.copy_(torch.tensor([1, 2, 3]))  # a reused batch buffer: the next batch arrives

    error = _error_of(cell)
    assert error is not None and error.family == "embedding_index_out_of_range"
    assert error.count == 1 and [tuple(p) for p in error.positions] == [(1,)]
    assert not error.value_known and error.values == [None]
    assert "not known, at [1] (the tensor was changed in place before the cell ended)" in str(error)
    assert "2 at [1]" not in str(error)


def test_a_buffer_changed_after_its_window_was_folded_keeps_its_value() -> None:
    table = torch.randn(5, 3)
    buffer = torch.tensor([1, 7, 2])

    def cell() -> None:
        F.embedding(buffer, table)
        for _ in range(HOLD_ENTRIES):
            F.embedding(torch.tensor([0]), table)  # fills the window: the fold runs while the value is still 7
        buffer.copy_(torch.tensor([1, 2, 3]))

    error = _error_of(cell)
    assert error is not None and error.value_known and error.values == [7]


def test_under_inference_mode_a_bad_id_is_folded_at_once_and_reported() -> None:
    table = torch.randn(5, 3)
    with torch.inference_mode():
        ids = torch.tensor([[4, 5]])

        def cell() -> None:
            F.embedding(ids, table)
            assert BOARD.state(GPU)[0].item() == 1  # folded at once: an inference tensor has no version to watch

        error = _error_of(cell)
    assert error is not None and error.values == [5] and [tuple(p) for p in error.positions] == [(0, 1)]


def test_an_input_too_large_to_hold_is_folded_at_once() -> None:
    table = torch.randn(10, 2)
    ids = torch.zeros(HOLD_ELEMENTS + 1, dtype=torch.int64)
    ids[-1] = 10

    def cell() -> None:
        F.embedding(ids, table)
        assert BOARD.state(GPU)[0].item() == 1

    error = _error_of(cell)
    assert error is not None and error.values == [10] and [tuple(p) for p in error.positions] == [(HOLD_ELEMENTS,)]


def test_a_valid_cell_with_held_checks_reports_nothing_and_the_next_cell_starts_clean() -> None:
    table = torch.randn(5, 3)

    def valid() -> None:
        for _ in range(HOLD_ENTRIES + 10):
            F.embedding(torch.tensor([0, 4]), table)

    assert _error_of(valid) is None
    assert not BOARD.state(GPU).any()
    error = _error_of(lambda: F.embedding(torch.tensor([5]), table))
    assert error is not None and error.values == [5] and error.count == 1
