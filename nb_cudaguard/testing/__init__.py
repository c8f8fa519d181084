"""Fault injection: a simulated GPU, for tests, demos and machines without one; as strict as a real one, never kinder.

This is the one stand-in in the package. It plays the GPU's part and nothing else: the extension, the capture,
the diagnosis and the restart all run for real against it.

``enable()`` turns on a simulated CUDA device (``device.py``): ``torch.cuda.is_available()`` says yes, and the
tensors and modules the notebook moves there stay CPU tensors recorded in a side table, reporting ``cuda:0``.
Ops on them run on the CPU; when the CPU kernel rejects an input, ``kernels.py`` says what CUDA does instead:

1. a device assert: its real-format line (``.../Loss.cu:200: nll_loss_forward_reduce_cuda_kernel_2d: block:
   [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.``) is written to file descriptor 2, at C
   level, the real CUDA error is raised (``torch.AcceleratorError`` where torch has it) and the context is poisoned;
2. a host-side check: the same error is raised and the context survives.

Once poisoned, every op on a device tensor, every new device tensor and every read of a device value (``.item()``,
``.tolist()``, ``.cpu()``, printing, a comparison used as a bool) raises the CUDA error until the process restarts,
for the user and for the extension alike: ``probe.internal_use()`` opens nothing, and each read it marks that the
simulation refused is counted (``refused_reads``) so that tests can prove the diagnosis never tries. Metadata
(shape, dtype, device) stays readable, and so does everything on the host: CPU tensors, NumPy arrays, datasets.

``poison(family)`` prints the line, poisons and raises directly, without an op.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nb_cudaguard.incident import probe
from nb_cudaguard.testing import device, frames, kernels, runtime

if TYPE_CHECKING:
    import torch
    from torch._ops import OpOverload
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "CUDA_ASSERT_MESSAGE",
    "SimulatedCudaProbe",
    "assertion_line",
    "disable",
    "enable",
    "is_enabled",
    "is_poisoned",
    "on_device",
    "poison",
    "refused_reads",
    "reset",
]

CUDA_ASSERT_MESSAGE = (
    "CUDA error: device-side assert triggered\n"
    "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
assertion_line = kernels.assertion_line
_ADV_INDEX = kernels.ADV_INDEX  # what benchmarks/bench_diagnose.py prints


def _cuda_error(message: str = CUDA_ASSERT_MESSAGE) -> RuntimeError:
    """CUDA's error as ``C10_CUDA_CHECK`` raises it, shown by IPython without the simulation's frames."""
    torch = sys.modules.get("torch")
    error_class = getattr(torch, "AcceleratorError", RuntimeError) if torch is not None else RuntimeError
    error: RuntimeError = error_class(message)
    frames.hide(error)
    return error


class _State:
    poisoned: bool = False
    message: str = CUDA_ASSERT_MESSAGE
    dispatch_mode: TorchDispatchMode | None = None
    function_mode: TorchFunctionMode | None = None
    saved_cuda: dict[str, Any] | None = None
    refused_reads: int = 0
    table: device.Table = device.Table()


_state = _State()


class SimulatedCudaProbe:
    """Same interface as ``probe.CudaProbe``; answers for the simulated context."""

    name = "fault_injection"

    def check(self) -> probe.Health:
        if _state.poisoned:
            return probe.Health(
                "poisoned",
                "simulated sticky CUDA error: every later CUDA call fails until the process restarts",
                _state.message,
                source="fault_injection",
            )
        return probe.Health("healthy", "simulated CUDA context works", source="fault_injection")


def _emit(kernel: kernels.Kernel, threads: int = 4) -> None:
    """Write the lines at C level, like the device runtime does, so that they go where real ones go."""
    text = "".join(kernels.assertion_line(kernel, thread) + "\n" for thread in range(threads))
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
    __tracebackhide__ = True
    kernel = kernels.FAMILY_KERNELS.get(family, kernels.NLL)
    probe.set_probe(SimulatedCudaProbe())
    _emit(kernel, threads)
    _state.poisoned = True
    raise _cuda_error()


def _refused() -> RuntimeError:
    if probe.in_internal_use():
        _state.refused_reads += 1
    return _cuda_error(_state.message)


def _row_for(func: OpOverload, args: Sequence[Any], message: str) -> kernels.Row | None:
    op = func.overloadpacket.__name__
    prefer = set()
    if op.startswith("nll_loss") and len(args) > 3 and args[3] == 0:
        prefer.add("nll_target_out_of_range_no_reduce")
    if func._overloadname.startswith("value"):
        prefer.add("scatter_value_out_of_bounds")
    if op == "multinomial" and len(args) > 2 and args[2] and args[1] > 1:  # Distributions.cpp's slow path
        prefer.add("multinomial_replacement_zero_sum")
    return kernels.row_for(op, message, frozenset(prefer))


def _make_dispatch_mode() -> TorchDispatchMode:
    from torch.utils._python_dispatch import TorchDispatchMode

    table = _state.table

    class SimulatedCudaMode(TorchDispatchMode):
        """Every ATen op: refused on a poisoned device, its CPU errors turned into CUDA's, its results recorded."""

        def __torch_dispatch__(
            self,
            func: OpOverload,
            types: Sequence[type],
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            __tracebackhide__ = True
            kwargs = kwargs or {}
            on_gpu = any(t in table for t in device.tensors_in((args, kwargs)))
            if on_gpu and _state.poisoned:
                raise _refused()
            try:
                result = func(*args, **kwargs)
            except (IndexError, RuntimeError, ValueError) as exc:
                row = _row_for(func, args, str(exc)) if on_gpu else None
                kernel = kernels.kernel_for(row, func.overloadpacket.__name__, args) if row is not None else None
                frames.hide(exc)
                if kernel is None:
                    raise  # a host-side check (or a host op): CUDA raises the same, and the context survives
                _emit(kernel)
                _state.poisoned = True
                raise _cuda_error() from None
            except Exception as exc:
                frames.hide(exc)
                raise
            if not on_gpu:
                return result
            for tensor in device.tensors_in(result):
                table.add(tensor)
            return result

    return SimulatedCudaMode()  # type: ignore[no-untyped-call]  # torch leaves TorchDispatchMode.__init__ untyped


def enable() -> None:
    """Turn the simulated GPU on in this thread (idempotent) and install its probe."""
    probe.set_probe(SimulatedCudaProbe())
    if _state.dispatch_mode is None:
        _state.saved_cuda = runtime.patch(runtime.Runtime(_state.table, is_poisoned, _refused, _cuda_error))
        _state.function_mode = device.make_mode(_state.table, is_poisoned, _refused)
        _state.function_mode.__enter__()
        _state.dispatch_mode = _make_dispatch_mode()
        _state.dispatch_mode.__enter__()


def disable() -> None:
    """Turn the simulation off; a poisoned state stays poisoned (a real one does too) until ``reset``."""
    if _state.dispatch_mode is not None:
        _state.dispatch_mode.__exit__(None, None, None)
        _state.dispatch_mode = None
    if _state.function_mode is not None:
        _state.function_mode.__exit__(None, None, None)
        _state.function_mode = None
    if _state.saved_cuda is not None:
        runtime.unpatch(_state.saved_cuda)
        _state.saved_cuda = None


def is_enabled() -> bool:
    return _state.dispatch_mode is not None


def is_poisoned() -> bool:
    return _state.poisoned


def on_device(tensor: torch.Tensor) -> bool:
    """Whether the notebook put this tensor (its storage) on the simulated device."""
    return tensor in _state.table


def refused_reads() -> int:
    """How many of the extension's own reads (inside ``probe.internal_use()``) the poisoned device refused."""
    return _state.refused_reads


def reset() -> None:
    """Forget everything, as a new process would. Tests use it; a restart gets it for free."""
    disable()
    _state.poisoned = False
    _state.refused_reads = 0
    _state.table.clear()
    probe.set_probe(None)
