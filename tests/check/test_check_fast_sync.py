"""The fast mode adds no host synchronisation to a training step: counted, not assumed.

``SyncCounter`` records every op that makes the host wait for the device: ``_local_scalar_dense`` (``.item()``,
``bool(t)``, ``int(t)``) of a device tensor, every op tagged ``data_dependent_output`` or ``dynamic_output_shape``
(``nonzero``, ``masked_select``, ``unique``..., which must read the device to size their output) on one, and copies
from a device to the CPU. The steps run on the simulated GPU (``nb_cudaguard.testing``): its tensors are CPU tensors
that it records as on the device, and some host reads bypass the dispatcher (``tolist``, ``numpy``), so those
methods are counted at the Python level too. Reads of host tensors are not waits and are not counted: the fast
checks read a CPU index, or the host tensor a device index was copied from, at once (``fast.readable``). The
counter is shown to work: the exact mode's read-backs of the device are counted.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")

from check_models import SmallCNN, TinyLM, cnn_batch, lm_batch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from nb_cudaguard import CudaCheckError, testing  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.check.fast.mode import FastChecker  # noqa: E402
from nb_cudaguard.check.fast.readable import READS  # noqa: E402
from nb_cudaguard.check.mode import Checker  # noqa: E402
from nb_cudaguard.record.copies import COPIES  # noqa: E402

aten = torch.ops.aten
_SYNC_TAGS = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)


def _to_host(func, on_device: list[bool], kwargs: dict) -> bool:
    if func is aten._to_copy.default:
        return on_device[0] and kwargs.get("device") == torch.device("cpu")
    return func is aten.copy_.default and on_device[1] and not on_device[0]


class SyncCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.found: Counter[str] = Counter()
        self._patched: list[tuple[str, object]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        on_device = [testing.on_device(t) for t in args if isinstance(t, torch.Tensor)]
        result = func(*args, **kwargs)
        if func is aten._local_scalar_dense.default or any(tag in func.tags for tag in _SYNC_TAGS):
            if any(on_device):
                self.found[str(func)] += 1
        elif _to_host(func, on_device, kwargs):
            self.found["device-to-host copy"] += 1
        return result

    def __enter__(self):
        for name in ("tolist", "numpy"):
            original = getattr(torch.Tensor, name)

            def counted(t, *a, _original=original, _name=name, **k):
                if testing.on_device(t):
                    self.found[f"Tensor.{_name}"] += 1
                return _original(t, *a, **k)

            self._patched.append((name, original))
            setattr(torch.Tensor, name, counted)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._patched:
            setattr(torch.Tensor, name, original)
        self._patched = []
        return super().__exit__(*exc)


def _lm():
    torch.manual_seed(0)
    model = TinyLM(vocab=100, d_model=32, layers=2, heads=2, context=16)
    return model, lm_batch(4, 16, 100)


def _cnn():
    torch.manual_seed(0)
    return SmallCNN(classes=10), cnn_batch(8)


def _step(model, optimizer, inputs, labels) -> None:
    optimizer.zero_grad(set_to_none=True)
    model.loss(inputs, labels).backward()
    optimizer.step()


@pytest.fixture(autouse=True)
def gpu():
    """The simulated GPU, and the copies to it seen (as in a notebook with the extension loaded)."""
    installed = not COPIES._originals
    COPIES.install()
    testing.enable()
    yield
    testing.reset()
    if installed:
        COPIES.uninstall()


def _on_gpu(tensor, copied: bool):
    """``tensor`` on the simulated GPU: copied from the host (its values known there), or made there."""
    moved = tensor.to("cuda")
    if not copied:
        moved = moved.clone()  # made on the device: no host tensor holds its values
        assert COPIES.source_of(moved) is None
    return moved


def _count(
    make, checker=None, bad_label: int | None = None, errors: list | None = None, copied: bool = False
) -> Counter[str]:
    model, (inputs, labels) = make()
    if bad_label is not None:
        labels = labels.clone()
        labels.view(-1)[1] = bad_label
    model, inputs, labels = model.to("cuda"), _on_gpu(inputs, copied), _on_gpu(labels, copied)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with SyncCounter() as counter:
        if checker is None:
            _step(model, optimizer, inputs, labels)
        else:
            try:
                with checker:
                    _step(model, optimizer, inputs, labels)
                    found = Counter(counter.found)  # before the block's end, where the board is read once
            except CudaCheckError as exc:
                if errors is None:
                    raise
                errors.append(exc)
            counter.found = found
    return counter.found


@pytest.mark.parametrize("copied", [False, True], ids=["made-on-device", "copied-from-host"])
@pytest.mark.parametrize("make", [_lm, _cnn], ids=["transformer", "cnn"])
def test_fast_step_has_no_host_synchronisation(make, copied: bool) -> None:
    assert _count(make, copied=copied) == Counter()  # the plain step itself has none
    read = READS.valid
    assert _count(make, FastChecker(), copied=copied) == Counter()
    assert (READS.valid > read) == copied  # a copied batch's checks read its host source, never the device


@pytest.mark.parametrize("copied", [False, True], ids=["made-on-device", "copied-from-host"])
@pytest.mark.parametrize("make", [_lm, _cnn], ids=["transformer", "cnn"])
def test_fired_check_still_has_no_synchronisation_until_the_end(make, copied: bool) -> None:
    errors: list = []
    assert _count(make, FastChecker(), bad_label=10_000, errors=errors, copied=copied) == Counter()
    assert len(errors) == 1 and isinstance(errors[0], FastCheckError)
    assert errors[0].family == "label_out_of_range" and errors[0].values == [10_000]


def test_the_counter_sees_the_exact_modes_read_backs() -> None:
    found = _count(_lm, Checker())
    assert found["Tensor.tolist"] >= 3  # embedding x2, nll_loss: one read-back each
    with pytest.raises(CudaCheckError):
        _count(_lm, Checker(), bad_label=10_000)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fast_step_on_gpu_under_cuda_sync_debug_mode(gpu) -> None:
    """On a GPU the driver itself says whether anything synchronised: set_sync_debug_mode('error') raises."""
    model, (inputs, labels) = _lm()
    model, inputs, labels = model.cuda(), inputs.cuda(), labels.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    _step(model, optimizer, inputs, labels)  # warm-up: lazy initialisations may synchronise once
    checker = FastChecker().__enter__()
    try:
        torch.cuda.set_sync_debug_mode("error")
        try:
            _step(model, optimizer, inputs, labels)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    finally:
        checker.__exit__(None, None, None)
