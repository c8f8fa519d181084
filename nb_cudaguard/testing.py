"""Fault injection: a simulated poisoned CUDA context, for tests, demos and machines without a GPU.

This is the one stand-in in the package. It plays the GPU's part and nothing else: the extension, the capture,
the diagnosis and the restart all run for real against it.

``enable()`` installs a torch dispatch mode. While it is on, the CPU ops that have a CUDA device assertion
behave the way their CUDA kernels do when given the same bad input:

1. the real-format assertion line (``.../Loss.cu:200: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0],
   thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.``) is written to file descriptor 2, at C level;
2. the real CUDA error text is raised (``torch.AcceleratorError`` where torch has it, else ``RuntimeError``);
3. the simulated context stays poisoned: every later torch op raises the same error until the process restarts,
   and the simulated probe (same interface as ``probe.CudaProbe``) reports ``poisoned``.

``poison(family)`` does steps 1 to 3 directly, without an op. The extension's own reads of tensor values run
inside ``probe.internal_use()`` and are let through, the way a real diagnosis reads CPU copies.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nb_cudaguard.incident import probe

if TYPE_CHECKING:
    from torch._ops import OpOverload
    from torch.utils._python_dispatch import TorchDispatchMode

_PREFIX = "/__w/pytorch/pytorch/aten/src/ATen/native/cuda/"


@dataclass(frozen=True)
class _Kernel:
    file: str
    line: int
    kernel: str
    condition: str


# What a CUDA build of torch 2.14.1 prints for each op (file, line, kernel: shared/reference/torch_cuda_asserts.json).
_NLL = _Kernel("Loss.cu", 200, "nll_loss_forward_reduce_cuda_kernel_2d", "t >= 0 && t < n_classes")
_NLL2D = _Kernel("NLLLoss2d.cu", 108, "nll_loss2d_forward_kernel", "t >= 0 && t < n_classes")
_INDEX_SELECT = _Kernel("Indexing.cu", 1558, "indexSelectLargeIndex", "srcIndex < srcSelectDimSize")
_INDEX_ADD = _Kernel("Indexing.cu", 1035, "indexFuncLargeIndex", "dstIndex < dstAddDimSize")
_ADV_INDEX = _Kernel(
    "IndexKernel.cu", 111, "operator()", '-sizes[i] <= index && index < sizes[i] && "index out of bounds"'
)
_TAKE = _Kernel(
    "IndexKernel.cu", 367, "operator()", 'idx < numel && idx >= -numel && "cuda_take_put_kernel() index out of bounds"'
)
_GATHER = _Kernel(
    "ScatterGatherKernel.cu",
    450,
    "operator()",
    'idx_dim >= 0 && idx_dim < index_size && "scatter gather kernel index out of bounds"',
)
_BCE_INPUT = _Kernel("Loss.cu", 89, "operator()", "input_val >= zero && input_val <= one")
_BCE_TARGET = _Kernel("Loss.cu", 90, "operator()", "target_val >= zero && target_val <= one")
_MULTINOMIAL = _Kernel(
    "TensorCompare.cu",
    112,
    "_assert_async_cuda_kernel",
    "probability tensor contains either `inf`, `nan` or element < 0",
)
_MULTINOMIAL_ZERO = _Kernel(
    "TensorCompare.cu", 112, "_assert_async_cuda_kernel", "invalid multinomial distribution (sum of probabilities <= 0)"
)
_EMBEDDING_BAG = _Kernel(
    "EmbeddingBag.cu",
    137,
    "EmbeddingBag_updateOutputKernel_sum_mean",
    '!has_invalid_index && "Invalid input index in EmbeddingBag: index out of range [0, numRows)"',
)

_BY_OP = {
    "nll_loss_forward": _NLL,
    "nll_loss_nd": _NLL,
    "nll_loss2d_forward": _NLL2D,
    "embedding": _INDEX_SELECT,
    "index_select": _INDEX_SELECT,
    "index_add": _INDEX_ADD,
    "index_add_": _INDEX_ADD,
    "index": _ADV_INDEX,
    "index_put": _ADV_INDEX,
    "index_put_": _ADV_INDEX,
    "_index_put_impl_": _ADV_INDEX,
    "take": _TAKE,
    "put_": _TAKE,
    "gather": _GATHER,
    "scatter": _GATHER,
    "scatter_": _GATHER,
    "scatter_add": _GATHER,
    "scatter_add_": _GATHER,
    "scatter_reduce": _GATHER,
    "scatter_reduce_": _GATHER,
    "one_hot": _GATHER,
    "binary_cross_entropy": _BCE_INPUT,
    "_assert_async": _MULTINOMIAL,
    "multinomial": _MULTINOMIAL,
    "_embedding_bag": _EMBEDDING_BAG,
    "_embedding_bag_forward_only": _EMBEDDING_BAG,
    "embedding_bag": _EMBEDDING_BAG,
}

_BY_FAMILY = {
    "label_out_of_range": _NLL,
    "negative_label": _NLL,
    "num_classes_mismatch": _NLL,
    "embedding_index_out_of_range": _INDEX_SELECT,
    "vocab_resize_missing": _INDEX_SELECT,
    "position_ids_too_long": _INDEX_SELECT,
    "token_type_ids_out_of_range": _INDEX_SELECT,
    "advanced_index_out_of_bounds": _ADV_INDEX,
    "gather_scatter_index": _GATHER,
    "one_hot_num_classes": _GATHER,
    "bce_input_range": _BCE_INPUT,
    "bce_target_range": _BCE_TARGET,
    "multinomial_invalid_probs": _MULTINOMIAL,
}

CUDA_ASSERT_MESSAGE = (
    "CUDA error: device-side assert triggered\n"
    "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def assertion_line(kernel: _Kernel, thread: int = 0) -> str:
    return (
        f"{_PREFIX}{kernel.file}:{kernel.line}: {kernel.kernel}: block: [0,0,0], thread: [{thread},0,0] "
        f"Assertion `{kernel.condition}` failed."
    )


def _cuda_error(message: str = CUDA_ASSERT_MESSAGE) -> RuntimeError:
    torch = sys.modules.get("torch")
    error_class = getattr(torch, "AcceleratorError", RuntimeError) if torch is not None else RuntimeError
    return error_class(message)


class _State:
    poisoned: bool = False
    message: str = CUDA_ASSERT_MESSAGE
    mode: TorchDispatchMode | None = None


_state = _State()


class SimulatedCudaProbe:
    """Same interface as ``probe.CudaProbe``; answers for the simulated context."""

    name = "fault_injection"

    def check(self) -> probe.Health:
        if _state.poisoned:
            return probe.Health(
                "poisoned",
                "simulated sticky CUDA error: every later torch op fails until the process restarts",
                _state.message,
                source="fault_injection",
            )
        return probe.Health("healthy", "simulated CUDA context works", source="fault_injection")


def _emit(kernel: _Kernel, threads: int = 4) -> None:
    """Write the lines at C level, like the device runtime does, so that they go where real ones go."""
    text = "".join(assertion_line(kernel, thread) + "\n" for thread in range(threads))
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        os.write(2, text.encode())
    except OSError:
        pass


def poison(family: str = "label_out_of_range", threads: int = 4) -> None:
    """Simulate a device-side assert of ``family`` right now: print the line, poison, raise."""
    kernel = _BY_FAMILY.get(family, _NLL)
    probe.set_probe(SimulatedCudaProbe())
    _emit(kernel, threads)
    _state.poisoned = True
    raise _cuda_error()


def _kernel_for(op_name: str, message: str) -> _Kernel | None:
    kernel = _BY_OP.get(op_name)
    if kernel is _BCE_INPUT and "target" in message:
        return _BCE_TARGET
    if kernel is _MULTINOMIAL and "sum of probabilities" in message:
        return _MULTINOMIAL_ZERO
    return kernel


def _make_mode() -> TorchDispatchMode:
    from torch.utils._python_dispatch import TorchDispatchMode

    class SimulatedCudaMode(TorchDispatchMode):
        def __torch_dispatch__(
            self,
            func: OpOverload,
            types: Sequence[type],
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            if probe.in_internal_use():
                return func(*args, **kwargs)
            if _state.poisoned:
                raise _cuda_error(_state.message)
            try:
                return func(*args, **kwargs)
            except (IndexError, RuntimeError, ValueError) as exc:
                kernel = _kernel_for(func.overloadpacket.__name__, str(exc))
                if kernel is None:
                    raise
                _emit(kernel)
                _state.poisoned = True
                raise _cuda_error() from None

    return SimulatedCudaMode()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ untyped


def enable() -> None:
    """Turn the simulated GPU on in this thread (idempotent) and install its probe."""
    probe.set_probe(SimulatedCudaProbe())
    if _state.mode is None:
        _state.mode = _make_mode()
        _state.mode.__enter__()


def disable() -> None:
    """Turn the simulation off; a poisoned state stays poisoned (a real one does too) until ``reset``."""
    if _state.mode is not None:
        _state.mode.__exit__(None, None, None)
        _state.mode = None


def is_enabled() -> bool:
    return _state.mode is not None


def is_poisoned() -> bool:
    return _state.poisoned


def reset() -> None:
    """Forget everything, as a new process would. Tests use it; a restart gets it for free."""
    disable()
    _state.poisoned = False
    probe.set_probe(None)
