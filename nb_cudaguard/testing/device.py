"""The simulated device: CPU tensors that the notebook put "on the GPU", tracked in a side table.

A real poisoned GPU keeps a tensor's metadata (shape, dtype, device) readable on the host and refuses every read of
its values; the host's own memory stays readable. To play that part without a GPU, the simulation never makes a
tensor that claims to live on CUDA (ATen's autograd engine and device guards would need a CUDA runtime). Instead:

* **Where a tensor lives** is a side table keyed by weak references to storages (``StorageWeakRef``, as torch's own
  functionalisation does): views share their base's storage, so a view of a device tensor is on the device too, and
  the entry goes when the storage is freed.
* **Putting a tensor on the device** (``.to("cuda")``, ``.cuda()``, ``device="cuda"`` in a factory or as torch's
  default device, ``module.to(device)``, which calls ``.to`` on every parameter) is caught by a
  ``TorchFunctionMode``: the call runs on the CPU into a *new* storage (the host original stays a separate, readable
  object, as on a GPU) and the result is recorded. Results of ops on device tensors are recorded by the dispatch mode
  in ``faults.py``, which sees every ATen op, backward included.
* **What the notebook sees**: the same mode answers ``.device`` (``cuda:0``), ``.is_cuda``, ``.is_cpu`` and
  ``.get_device()`` for recorded tensors, ``.numpy()`` refuses them as on CUDA, ``repr`` shows ``device='cuda:0'``,
  and ``torch.cuda``'s runtime API answers for one device (``runtime.py``), so ``device = "cuda" if
  torch.cuda.is_available() else "cpu"`` picks it.
* **Reads that leave the device** (``.cpu()``, ``.to("cpu")``, ``.tolist()``, ``.item()``, printing, a comparison
  used as a bool) copy to a new host storage while the context is healthy and raise the CUDA error once it is
  poisoned, for the user and the extension alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from nb_cudaguard.testing import frames

if TYPE_CHECKING:
    import torch
    from torch.overrides import TorchFunctionMode

_CHECKED = "nb_cudaguard.check.fast.entries"  # where the fast checks' entry points are made
NUMPY_REFUSAL = (
    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
)


class Table:
    """Storages on the simulated device, by weak reference (the entry dies with the storage), with their sizes.

    ``used`` turns true with the first device tensor and stays so, as CUDA stays initialised once it started."""

    def __init__(self) -> None:
        self._refs: dict[Any, int] = {}
        self.used = False

    def _key(self, tensor: torch.Tensor) -> Any | None:
        from torch.multiprocessing.reductions import StorageWeakRef

        try:
            return StorageWeakRef(tensor.untyped_storage())
        except (RuntimeError, NotImplementedError, TypeError):  # sparse and other storage-less layouts
            return None

    def add(self, tensor: torch.Tensor) -> None:
        key = self._key(tensor)
        if key is not None:
            if len(self._refs) > 4096:
                self._refs = {ref: size for ref, size in self._refs.items() if not ref.expired()}
            self._refs[key] = tensor.untyped_storage().nbytes()
            self.used = True

    def __contains__(self, tensor: object) -> bool:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(tensor, torch.Tensor) or not self._refs:
            return False
        key = self._key(tensor)
        return key is not None and key in self._refs and not key.expired()

    def discard(self, tensor: torch.Tensor) -> None:
        key = self._key(tensor)
        if key is not None:
            self._refs.pop(key, None)

    def allocated(self) -> int:
        """Bytes of the storages still alive on the device (what ``torch.cuda.memory_allocated`` counts)."""
        return sum(size for ref, size in self._refs.items() if not ref.expired())

    def clear(self) -> None:
        self._refs.clear()
        self.used = False


def tensors_in(value: object) -> Iterator[torch.Tensor]:
    """Every tensor in an op's arguments or result (lists, tuples, dicts, nested)."""
    from torch.utils._pytree import tree_flatten

    torch = sys.modules["torch"]
    leaves, _ = tree_flatten(value)
    return (leaf for leaf in leaves if isinstance(leaf, torch.Tensor))


def is_cuda_device(device: object) -> bool:
    """``"cuda"``, ``"cuda:0"``, ``torch.device("cuda")`` or a bare index (``device=0`` means a GPU in torch)."""
    torch = sys.modules["torch"]
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    return isinstance(device, torch.device) and device.type == "cuda"


def make_mode(table: Table, poisoned: Callable[[], bool], fail: Callable[[], BaseException]) -> TorchFunctionMode:
    """The mode that moves tensors to the simulated device and answers device queries for them."""
    import torch
    from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
    from torch.utils._device import DeviceContext, _device_constructors

    tensor_cls = torch.Tensor
    constructors = _device_constructors()
    cuda0 = torch.device("cuda", 0)
    getters: dict[str, Callable[[Any], Any]] = {
        "device": lambda t: cuda0,
        "is_cuda": lambda t: True,
        "is_cpu": lambda t: False,
    }

    def to_device(tensor: torch.Tensor, dtype: Any = None, **options: Any) -> torch.Tensor:
        __tracebackhide__ = True
        if tensor in table:
            return tensor if dtype is None or dtype == tensor.dtype else tensor.to(dtype)
        if poisoned():
            raise fail()  # a copy to a poisoned device fails
        moved = tensor.to("cpu", dtype=dtype, copy=True, **options)
        table.add(moved)
        return moved

    def to_host(tensor: torch.Tensor, dtype: Any = None, **options: Any) -> torch.Tensor:
        __tracebackhide__ = True
        if poisoned():
            raise fail()
        copy = tensor.to("cpu", dtype=dtype, copy=True, **options)
        table.discard(copy)  # the dispatch mode recorded the copy as an op's result on the device: it is not
        return copy

    def default_is_cuda() -> bool:
        """Whether a ``DeviceContext`` below this mode (``torch.set_default_device``, ``with torch.device(...)``)
        would put a factory's result on CUDA (``torch.get_default_device`` would make a tensor to find out)."""
        contexts = [mode for mode in _get_current_function_mode_stack() if isinstance(mode, DeviceContext)]
        return bool(contexts) and torch.device(contexts[-1].device).type == "cuda"

    def getter_name(func: Any) -> str | None:
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", None)
        return name if getattr(func, "__name__", "") == "__get__" and name in getters else None

    class SimulatedDeviceMode(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Sequence[type], args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            __tracebackhide__ = True
            try:
                kwargs = dict(kwargs or {})
                name = getter_name(func)
                if name is not None:
                    return getters[name](args[0]) if args[0] in table else func(*args, **kwargs)
                if func is tensor_cls.to:
                    return _to(args, kwargs)
                if func is tensor_cls.cuda:
                    return to_device(args[0], non_blocking=kwargs.get("non_blocking", False))
                if func is tensor_cls.cpu:
                    return to_host(args[0]) if args[0] in table else func(*args, **kwargs)
                if func is tensor_cls.get_device:
                    return 0 if args[0] in table else func(*args, **kwargs)
                if func is tensor_cls.numpy and args[0] in table:
                    raise TypeError(NUMPY_REFUSAL)
                if func is tensor_cls.tolist and args[0] in table and poisoned():
                    raise fail()
                if func is tensor_cls.__repr__ and args[0] in table:
                    if poisoned():  # printing reads the values, and torch's printing runs outside dispatch modes
                        raise fail()
                    describe: Callable[..., str] = func  # torch leaves Tensor.__repr__ untyped
                    text = describe(*args, **kwargs)
                    return text[:-1] + ", device='cuda:0')" if text.endswith(")") else text
                if func is tensor_cls.pin_memory and args[0] not in table:
                    # page-locked host memory (a DataLoader's pin_memory=True): a host copy, as pinning makes; a
                    # CPU-only torch or a CUDA build without a driver would refuse to pin at all
                    return args[0].clone(memory_format=torch.contiguous_format)
                if kwargs.get("pin_memory"):
                    kwargs["pin_memory"] = False  # torch.empty(..., pin_memory=True): host memory all the same
                if func is torch._C._nn.one_hot and args and args[0] in table:
                    return _one_hot_as_on_cuda(*args, **kwargs)
                if kwargs.get("device") is None and func in constructors and default_is_cuda():
                    kwargs["device"] = "cuda"  # torch.set_default_device("cuda"), whose mode sits below this one
                if "device" in kwargs and is_cuda_device(kwargs["device"]):
                    if poisoned():
                        raise fail()
                    kwargs["device"] = "cpu"
                    return _record(func(*args, **kwargs), args)
                if getattr(func, "__module__", None) == _CHECKED:
                    # a fast check's entry point, called again by torch's dispatch to this mode: its check ran
                    # outside, where this mode answers the device; in here it does not, so the device's tensors
                    # would claim to be on the CPU (a CUDA tensor never does) and be read: run what it wraps
                    func = func.__wrapped__
                return func(*args, **kwargs)
            except Exception as error:  # raised through the simulation: shown as a GPU would show it
                frames.hide(error)
                raise

    def _to(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        tensor, rest = args[0], args[1:]
        options = dict(kwargs)
        options.pop("copy", None)
        if rest and isinstance(rest[0], tensor_cls):  # .to(other): other's device and dtype
            target, dtype = (cuda0 if rest[0] in table else torch.device("cpu")), rest[0].dtype
            moved: dict[str, Any] = {}
        else:
            target, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **options)
            moved = {"non_blocking": non_blocking}
            if memory_format is not None:
                moved["memory_format"] = memory_format
        if target is not None and target.type == "cuda":
            return to_device(tensor, dtype, **moved)
        if target is not None and target.type == "cpu" and tensor in table:
            return to_host(tensor, dtype, **moved)
        return tensor.to(*rest, **kwargs)

    def _record(result: Any, inputs: Sequence[Any]) -> Any:
        """A factory's result on the device; one that shares a host input's storage (``as_tensor``) is copied first."""
        host = {id(t.untyped_storage()) for t in tensors_in(inputs) if t not in table}
        if isinstance(result, tensor_cls):
            if host and id(result.untyped_storage()) in host:
                result = result.clone()
            table.add(result)
            return result
        for tensor in tensors_in(result):
            table.add(tensor)
        return result

    def _one_hot_as_on_cuda(tensor: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
        """Onehot.cpp off the CPU: no host check of the values, the scatter's device assert catches them."""
        __tracebackhide__ = True
        if tensor.dtype != torch.long:
            raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
        if tensor.numel() == 0:
            return torch.nn.functional.one_hot(tensor, num_classes)
        if num_classes == -1:
            num_classes = int(tensor.max().item()) + 1
        elif num_classes < 1:
            raise RuntimeError("num_classes should be positive")
        result = torch.zeros(
            (*tensor.shape, num_classes), dtype=torch.long, device="cpu"
        )  # whatever the default device
        table.add(result)
        return result.scatter_(-1, tensor.unsqueeze(-1), 1)

    return SimulatedDeviceMode()
