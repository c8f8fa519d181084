"""An index the host can read without a synchronisation is read at once (``fast.readable``): a CPU tensor, or a
device tensor copied from a host tensor that neither side changed since. What must hold: such an index, valid, is
not deferred (the board holds nothing and counts no verdict); one whose values may differ from its source's (written
in place on the device, its source written in place, its memory shared with NumPy, its ``.data`` swapped) is
checked on the deferred path and still fires; a loss's ``ignore_index`` is told from a bad value; a bad value
gives the same error as before; and the same tensor, read valid twice, is not read again until it changes (a new
tensor at a freed one's address is read). Real ops, the simulated GPU (``nb_cudaguard.testing``) for device tensors.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
F = torch.nn.functional

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from nb_cudaguard import testing  # noqa: E402
from nb_cudaguard.check.fast.board import BOARD  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402
from nb_cudaguard.record.copies import COPIES  # noqa: E402


@pytest.fixture
def gpu():
    """The simulated GPU, and the copies to it seen (as in a notebook with the extension loaded)."""
    installed = not COPIES._originals
    COPIES.install()
    testing.enable()
    yield "cuda"
    testing.reset()
    if installed:
        COPIES.uninstall()


def _deferred(fn) -> tuple[int, FastCheckError | None]:
    """How many verdicts the board took while ``fn`` ran in a checked block, and the block's error."""
    before = BOARD.checks
    try:
        with FastChecker():
            fn()
    except FastCheckError as exc:
        return BOARD.checks - before, exc
    return BOARD.checks - before, None


def test_a_cpu_index_in_range_is_read_at_once_and_the_op_runs_on_it() -> None:
    table, logits = torch.randn(10, 3), torch.randn(4, 6)
    ids, labels = torch.tensor([[0, 9], [3, 2]]), torch.tensor([0, 5, 3, 2])
    results = []
    assert _deferred(lambda: results.append((F.embedding(ids, table), F.cross_entropy(logits, labels)))) == (0, None)
    assert torch.equal(results[0][0], table[ids]) and torch.equal(results[0][1], F.cross_entropy(logits, labels))
    assert _deferred(lambda: (ids.gather(1, torch.tensor([[1], [0]])), table[torch.tensor([9, 0])])) == (0, None)


def test_an_index_under_inference_mode_or_of_another_dtype_is_read_at_once_too() -> None:
    table = torch.randn(10, 3)
    with torch.inference_mode():
        frozen = torch.tensor([1, 9], dtype=torch.int32)
        assert _deferred(lambda: F.embedding(frozen, table)) == (0, None)
    taken, error = _deferred(lambda: (F.embedding(torch.tensor([2, 3], dtype=torch.int32), table), table[frozen + 1]))
    assert taken == 1 and error is not None and error.values == [10]


def test_a_device_copy_of_a_host_batch_is_read_from_the_host_until_either_changes(gpu) -> None:
    table = torch.randn(10, 3, device=gpu)
    host = torch.tensor([1, 2, 3])
    ids = host.to(gpu)
    assert _deferred(lambda: F.embedding(ids, table)) == (0, None)
    assert _deferred(lambda: F.embedding(ids[1:], table)) == (0, None)  # a view: the same view of the source

    ids.add_(0)  # written on the device: its values are no longer known to be the host's
    assert _deferred(lambda: F.embedding(ids, table)) == (1, None)
    ids[0] = 99
    taken, error = _deferred(lambda: F.embedding(ids, table))
    assert taken == 1 and error is not None and error.values == [99]

    made = torch.tensor([1, 2, 3], device=gpu)  # made on the device: no host tensor holds its values
    assert _deferred(lambda: F.embedding(made, table)) == (1, None)


def test_a_host_source_changed_after_the_copy_is_not_trusted(gpu) -> None:
    table = torch.randn(10, 3, device=gpu)
    host = torch.tensor([1, 12, 3])
    ids = host.to(gpu)  # the device holds the bad 12
    host[1] = 2  # the host's values now look valid
    taken, error = _deferred(lambda: F.embedding(ids, table))
    assert taken == 1 and error is not None and error.values == [12]

    buffer = np.array([1, 12, 3])
    shared = torch.from_numpy(buffer).to(gpu)
    buffer[1] = 2  # through NumPy: no version counter sees it
    taken, error = _deferred(lambda: F.embedding(shared, table))
    assert taken == 1 and error is not None and error.values == [12]

    host = torch.tensor([1, 12, 3])
    swapped = host.to(gpu)
    host.data = torch.tensor([1, 2, 3])  # another tensor's memory, no version bump
    taken, error = _deferred(lambda: F.embedding(swapped, table))
    assert taken == 1 and error is not None and error.values == [12]


@pytest.mark.parametrize("where", ["cpu", "copied"])
def test_ignored_targets_pass_and_a_bad_one_beside_them_fires(request, where: str) -> None:
    device = request.getfixturevalue("gpu") if where == "copied" else "cpu"
    logits = torch.randn(4, 6, device=device)

    def target(*values: int):
        return torch.tensor(values).to(device)

    assert _deferred(lambda: F.cross_entropy(logits, target(0, -100, 5, -100))) == (0, None)
    assert _deferred(lambda: F.cross_entropy(logits, target(0, 255, 5, 1), ignore_index=255)) == (0, None)
    taken, error = _deferred(lambda: F.cross_entropy(logits, target(0, -100, -1, 2)))
    assert taken == 1 and error is not None
    assert (error.family, error.values, [tuple(p) for p in error.positions]) == ("negative_label", [-1], [(2,)])
    taken, error = _deferred(lambda: F.nll_loss(logits, target(-100, 6, -100, 2)))
    assert taken == 1 and error is not None and error.values == [6]


class _Reads(TorchDispatchMode):
    """How many times an index's values were read on the host: ``aminmax``, the one op ``fast.readable`` reads
    them with (nothing else in these blocks calls it)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.aminmax:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _reads(fn) -> tuple[int, int, FastCheckError | None]:
    """Host reads while ``fn`` ran in a checked block, the verdicts the board took, and the block's error."""
    with _Reads() as reads:
        taken, error = _deferred(fn)
    return reads.count, taken, error


def test_the_same_tensor_is_read_twice_then_not_until_it_changes() -> None:
    table, small = torch.randn(10, 3), torch.randn(5, 3)
    ids = torch.tensor([[1, 2], [3, 7]])
    assert _reads(lambda: [F.embedding(ids, table) for _ in range(5)]) == (2, 0, None)

    def changed() -> None:
        for _ in range(3):
            F.embedding(ids, table)
        ids[0, 0] = 12  # in place: its version counter moves
        F.embedding(ids, table)

    reads, taken, error = _reads(changed)
    assert (reads, taken) == (3, 1) and error is not None and error.values == [12]
    ids[0, 0] = 1

    def swapped() -> None:
        for _ in range(3):
            F.embedding(ids, table)
        ids.data = torch.tensor([[1, 2], [3, 11]])  # no version bump: another data pointer
        F.embedding(ids, table)

    reads, taken, error = _reads(swapped)
    assert (reads, taken) == (3, 1) and error is not None and error.values == [11]

    trusted = torch.tensor([1, 7])
    reads, taken, error = _reads(
        lambda: [F.embedding(trusted, table) for _ in range(3)] + [F.embedding(trusted, small)]
    )
    assert (reads, taken) == (3, 1) and error is not None and error.values == [7]  # valid for 10 rows, not for 5


def test_memory_numpy_writes_to_is_read_every_time() -> None:
    table = torch.randn(10, 3)
    buffer = np.array([1, 2, 3])
    borrowed = torch.from_numpy(buffer)

    def cell() -> None:
        for _ in range(3):
            F.embedding(borrowed, table)
        buffer[1] = 12  # through NumPy: no version counter moves
        F.embedding(borrowed, table)

    reads, taken, error = _reads(cell)
    assert (reads, taken) == (4, 1) and error is not None and error.values == [12]


def test_a_new_tensor_made_where_a_trusted_one_was_freed_is_read() -> None:
    """A loader's next batch is often made where the last one was freed: the CUDA caching allocator gives it the
    same block (the same data pointer) and CPython the same object memory (the same id), at the same version. Only
    the tensor object itself is trusted, so the new one is read and its bad value fires."""
    table = torch.randn(10, 3)
    block = torch.tensor([1, 2, 3]).untyped_storage()

    def batch():
        return torch.empty(0, dtype=torch.long).set_(block, 0, (3,))  # in the same block every time

    writer = batch()

    def cell() -> None:
        ids = batch()
        F.embedding(ids, table)
        F.embedding(ids, table)  # read valid twice: trusted while it lives
        last = id(ids), ids.data_ptr(), ids._version
        writer[0] = 12  # the block's next batch
        del ids
        ids = batch()
        assert (id(ids), ids.data_ptr(), ids._version) == last  # all an id would see of it is the last one's
        F.embedding(ids, table)

    taken, error = _deferred(cell)  # no dispatch mode counting reads: its own objects would take the freed id
    assert taken == 1 and error is not None and error.values == [12]


def test_a_device_copy_is_read_twice_from_its_source_then_not_until_the_device_writes(gpu) -> None:
    table = torch.randn(10, 3, device=gpu)
    ids = torch.tensor([1, 2, 3]).to(gpu)

    def cell() -> None:
        for _ in range(4):
            F.embedding(ids, table)
        ids[0] = 12  # written on the device
        F.embedding(ids, table)

    reads, taken, error = _reads(cell)
    assert (reads, taken) == (2, 1) and error is not None and error.values == [12]


def test_a_bad_value_gives_the_error_it_gave_before(shell) -> None:
    shell.run_cell("import torch\nimport torch.nn.functional as F\ntorch.manual_seed(0)\nlogits = torch.randn(4, 5)")
    shell.run_cell(
        "labels = torch.tensor([0, -100, -1, 7])\nemb = torch.nn.Embedding(6, 2)\nids = torch.tensor([5, 6])"
    )
    shell.run_line_magic("cudaguard", "check on")
    try:
        first = shell.run_cell("loss = F.cross_entropy(logits, labels)").error_in_exec
        second = shell.run_cell("out = emb(ids)").error_in_exec
    finally:
        shell.run_line_magic("cudaguard", "check off")
    assert isinstance(first, FastCheckError) and isinstance(second, FastCheckError)
    texts = [re.sub(r"cell \[\d+\]", "cell [N]", str(error)) for error in (first, second)]
    assert texts == [BEFORE_LOSS, BEFORE_EMBEDDING]


# the texts the code before fast.readable gave for these two cells (their cell numbers left out)
BEFORE_LOSS = (
    "F.cross_entropy: argument target (labels) had 2 invalid value(s) (valid: [0, 5) or -100 "
    "(ignore_index))\n"
    "  first offending value: -1 at [2]\n"
    "  valid: [0, 5) or -100 (ignore_index) (from input.shape[1] (classes))\n"
    "  at: cell [N], line 1: loss = F.cross_entropy(logits, labels)\n"
    "  fix: A negative label is read as a class: padding or 'unknown' labels such as -1 need "
    "ignore_index=-1 in the loss (or mapping to -100, its default), and labels shifted by one from a "
    "0-based set start at -1.\n"
    "  nb_cudaguard (fast checks) ran this op on clamped values so that its kernel could not assert: the "
    "CUDA context is healthy, but this cell's results are wrong from this op on.\n"
    "  names this cell assigned or changed, now wrong: loss\n"
    "  choices: %cudaguard rerun --exact re-runs this cell under the exact checks (as %%cudacheck: they "
    "stop the op before it runs and list every offending value); or fix the input and run this cell "
    "again (no restart: no kernel asserted, the context is healthy)"
)
BEFORE_EMBEDDING = (
    "F.embedding: argument indices (ids) had 1 invalid value(s) (valid: [0, 6))\n"
    "  first offending value: 6 at [1]\n"
    "  valid: [0, 6) (from emb.num_embeddings = 6)\n"
    "  at: cell [N], line 1: out = emb(ids)\n"
    "  fix: Keep ids in [0, num_embeddings): check the tokenizer and the model come from the same "
    "checkpoint, call model.resize_token_embeddings(len(tokenizer)) after adding tokens, or enlarge "
    "nn.Embedding(num_embeddings=...).\n"
    "  nb_cudaguard (fast checks) ran this op on clamped values so that its kernel could not assert: the "
    "CUDA context is healthy, but this cell's results are wrong from this op on.\n"
    "  names this cell assigned or changed, now wrong: out\n"
    "  choices: %cudaguard rerun --exact re-runs this cell under the exact checks (as %%cudacheck: they "
    "stop the op before it runs and list every offending value); or fix the input and run this cell "
    "again (no restart: no kernel asserted, the context is healthy)"
)
