"""``torch.cuda``'s runtime API answered as one GPU answers it, on a CPU-only torch and a CUDA build without a driver.

Libraries ask more of ``torch.cuda`` than ``is_available()`` before they touch a tensor: ``TrainingArguments``
calls ``set_device``, timing code records events, the fast checks ask whether a graph capture is running. A CPU-only
torch answers those from dummy C bindings (``Tried to instantiate dummy base class``), so the simulated GPU answers
them itself, from one table (``patch``), and ``unpatch`` puts back exactly what it replaced.

After a device assert a real GPU keeps answering what the host holds and fails what asks the driver, each call's
``poisons`` column says which, and the simulation fails exactly those (the CUDA error, as ``C10_CUDA_CHECK`` raises
it). A sticky error is returned by every later runtime call that reaches the context (CUDA runtime API,
``cudaErrorAssert``: "the process must be terminated and relaunched"), so:

* host-side, working after the assert: ``is_available``/``device_count`` (cached at startup), ``current_device``,
  ``set_device`` to the current device (c10's ``SetDevice`` returns early), ``get_device_properties`` and its
  readers (cached per device by ``at::cuda::getDeviceProperties``), the caching allocator's counters
  (``memory_allocated``, ``max_memory_allocated``, ``reset_peak_memory_stats``: host structures), the seed
  (``manual_seed``: the generator's state lives on the host), the current stream and ``set_stream``;
* reaching the context, failing after the assert: ``synchronize``, ``mem_get_info`` (``cudaMemGetInfo``),
  ``empty_cache`` (``cudaFree`` of the cached blocks: pytorch/pytorch#25873, oobabooga/textgen#4170 show it
  raising "device-side assert triggered"), a stream's ``synchronize``/``query``/``wait_*`` and an event's
  ``record``/``wait``/``query``/``synchronize``/``elapsed_time``, and ``is_current_stream_capturing``
  (``cudaStreamIsCapturing``).

``set_device(1)`` fails as on a one-GPU machine: ``cudaSetDevice`` returns ``cudaErrorInvalidDevice``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nb_cudaguard.testing import frames

if TYPE_CHECKING:
    from nb_cudaguard.testing.device import Table

DEVICE_NAME = "nb_cudaguard simulated GPU"
INVALID_DEVICE = (
    "CUDA error: invalid device ordinal\n"
    "Search for `cudaErrorInvalidDevice' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` reports (the fields libraries read): an 80 GiB sm_90 device."""

    name: str = DEVICE_NAME
    major: int = 9
    minor: int = 0
    total_memory: int = 80 * 2**30
    multi_processor_count: int = 132
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 2048
    warp_size: int = 32
    L2_cache_size: int = 50 * 2**20


PROPERTIES = DeviceProperties()


class Runtime:
    """The simulated runtime's state: poisoning and failing come from the simulation, memory from the side table."""

    def __init__(
        self,
        table: Table,
        poisoned: Callable[[], bool],
        fail: Callable[[], BaseException],
        error: Callable[[str], BaseException],
    ) -> None:
        self.table, self.poisoned, self.fail, self.error = table, poisoned, fail, error
        self.peak = 0
        # torch.cuda.Stream and .Event as classes of this runtime: the current and default streams are instances
        self.stream_class, self.event_class = _bound_stream(self), _bound_event(self)
        self.default: Stream = self.stream_class(_default=True)
        self.current = self.default

    def check(self) -> None:
        """Raise the sticky error if the context is poisoned: for calls that reach the driver."""
        __tracebackhide__ = True
        if self.poisoned():
            raise self.fail()

    def index(self, device: object = None) -> int:
        """The device's ordinal; any but 0 is refused as cudaSetDevice refuses it on a one-GPU machine."""
        __tracebackhide__ = True
        import torch

        found = 0 if device is None else torch.cuda._utils._get_device_index(device, optional=True)
        if found != 0:
            raise self.error(INVALID_DEVICE)
        return found

    def allocated(self, device: object = None) -> int:
        self.index(device)
        now = self.table.allocated()
        self.peak = max(self.peak, now)  # frees are seen when asked, so the peak is the highest seen when asked
        return now

    def properties(self, device: object = None) -> DeviceProperties:
        __tracebackhide__ = True
        import torch

        if device is not None and torch.cuda._utils._get_device_index(device, optional=True) != 0:
            raise frames.hide(AssertionError("Invalid device id"))  # torch.cuda.get_device_properties's own check
        self.table.used = True
        return PROPERTIES

    def mem_get_info(self, device: object = None) -> tuple[int, int]:
        __tracebackhide__ = True
        self.check()
        return PROPERTIES.total_memory - self.allocated(device), PROPERTIES.total_memory

    def set_device(self, device: object) -> None:
        """Selecting the device starts CUDA (``is_initialized()`` turns true), as the first device tensor does."""
        __tracebackhide__ = True
        self.index(device)
        self.table.used = True

    def current_device(self) -> int:
        self.table.used = True
        return 0

    def capability(self, device: object = None) -> tuple[int, int]:
        found = self.properties(device)
        return found.major, found.minor

    def current_stream(self, device: object = None) -> Stream:
        self.index(device)
        return self.current

    def default_stream(self, device: object = None) -> Stream:
        self.index(device)
        return self.default

    def exchange(self, device: int) -> int:
        """``torch.cuda.device(i)``'s swap: the previous device, or -1 for a negative (no-op) index."""
        __tracebackhide__ = True
        if device < 0:
            return -1
        self.set_device(device)
        return 0

    def set_stream(self, stream: Stream | None) -> None:
        if stream is not None:
            self.current = stream

    def capturing(self) -> bool:
        __tracebackhide__ = True
        self.check()
        return False

    def reset_peak(self, device: object = None) -> None:
        self.peak = 0
        self.allocated(device)

    def max_allocated(self, device: object = None) -> int:
        self.allocated(device)
        return self.peak

    def empty_cache(self) -> None:
        __tracebackhide__ = True
        if self.table.used:  # torch empties nothing before CUDA starts
            self.check()

    def synchronize(self, device: object = None) -> None:
        __tracebackhide__ = True
        self.index(device)
        self.check()


class _Work:
    """What streams and events share: their work is done on the host at once, so asking about it only reaches
    the driver, which refuses once the context is poisoned."""

    runtime: Runtime

    def query(self) -> bool:
        __tracebackhide__ = True
        self.runtime.check()
        return True

    def synchronize(self) -> None:
        __tracebackhide__ = True
        self.runtime.check()


class Stream(_Work):
    """A stream of the simulated GPU: its ops run on the host at once, so its work is always done."""

    def __init__(self, runtime: Runtime, device: object = None, priority: int = 0, _default: bool = False) -> None:
        import torch

        runtime.index(device)
        self.runtime, self.priority = runtime, priority
        self.device = torch.device("cuda", 0)
        self.device_index, self.device_type = 0, 1  # the device type's number, as torch's streams report it
        self.stream_id = 0 if _default else id(self)
        self.cuda_stream = self.stream_id

    def is_capturing(self) -> bool:
        __tracebackhide__ = True
        return self.runtime.capturing()

    def wait_event(self, event: Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event(self.runtime)
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.cuda_stream:#x}>"


class Event(_Work):
    """An event of the simulated GPU: recorded when its stream's work is done, which on the host is at once."""

    def __init__(self, runtime: Runtime, enable_timing: bool = False, blocking: bool = False, **_: Any) -> None:
        self.runtime, self.enable_timing, self.blocking = runtime, enable_timing, blocking
        self.at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        __tracebackhide__ = True
        self.runtime.check()
        self.at = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        __tracebackhide__ = True
        self.runtime.check()

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between the two records, with CUDAEvent's own checks."""
        __tracebackhide__ = True
        self.runtime.check()
        if not (self.enable_timing and end_event.enable_timing):
            raise frames.hide(RuntimeError("Both events must be created with argument 'enable_timing=True'."))
        if self.at is None or end_event.at is None:
            raise frames.hide(RuntimeError("Both events must be recorded before calculating elapsed time."))
        return (end_event.at - self.at) * 1000.0


def table_for(runtime: Runtime) -> dict[str, Any]:
    """The one table: each name in ``torch.cuda`` and what answers it on the simulated GPU."""
    return {
        "is_available": lambda: True,
        "is_initialized": lambda: runtime.table.used,
        "device_count": lambda: 1,
        "current_device": runtime.current_device,
        "set_device": runtime.set_device,
        "_exchange_device": runtime.exchange,
        "_maybe_exchange_device": runtime.exchange,
        "get_device_properties": runtime.properties,
        "get_device_name": lambda device=None: runtime.properties(device).name,
        "get_device_capability": runtime.capability,
        "mem_get_info": runtime.mem_get_info,
        "memory_allocated": runtime.allocated,
        "max_memory_allocated": runtime.max_allocated,
        "reset_peak_memory_stats": runtime.reset_peak,
        "empty_cache": runtime.empty_cache,
        "synchronize": runtime.synchronize,
        # the simulated device's random ops draw from the host's generator, which torch.manual_seed seeds: a
        # CUDA-only seed has no generator of its own to seed (torch's own would index the absent CUDA generators)
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "is_current_stream_capturing": runtime.capturing,
        "current_stream": runtime.current_stream,
        "default_stream": runtime.default_stream,
        "set_stream": runtime.set_stream,
        "Stream": runtime.stream_class,
        "Event": runtime.event_class,
    }


def _bound_stream(runtime: Runtime) -> Callable[..., Stream]:
    """``torch.cuda.Stream`` as a class (libraries annotate with it, ``torch.cuda.Stream | None``, and test
    ``isinstance``), whose streams belong to ``runtime``."""

    class CudaStream(Stream):
        def __init__(self, device: object = None, priority: int = 0, _default: bool = False, **_: Any) -> None:
            super().__init__(runtime, device, priority, _default)

    CudaStream.__name__ = CudaStream.__qualname__ = "Stream"
    return CudaStream


def _bound_event(runtime: Runtime) -> Callable[..., Event]:
    """``torch.cuda.Event`` as a class, whose events belong to ``runtime``."""

    class CudaEvent(Event):
        def __init__(self, enable_timing: bool = False, blocking: bool = False, **_: Any) -> None:
            super().__init__(runtime, enable_timing, blocking)

    CudaEvent.__name__ = CudaEvent.__qualname__ = "Event"
    return CudaEvent


def accelerator_table(runtime: Runtime) -> dict[str, Any]:
    """``torch.accelerator``'s questions, where a CUDA build asks them (an optimizer's step checks the current
    stream for a graph capture when the build's accelerator is CUDA and ``is_available()``, which the simulation
    says yes to); a CPU-only build has no accelerator and never asks."""
    return {
        "current_device_index": lambda: 0,
        "set_device_index": runtime.set_device,
        "current_stream": runtime.current_stream,
        "set_stream": runtime.set_stream,
        "synchronize": runtime.synchronize,
        "device_count": lambda: 1,
    }


# cuDNN's own kernels: a CUDA build's RNN modules call them for a tensor that says it is on CUDA
# (``RNNBase.flatten_parameters`` asks ``is_acceptable``), and the simulated device's tensors live on the CPU, where
# no cuDNN op exists. Refused as a build without cuDNN refuses them, the modules take their native kernels.
CUDNN_TABLE = {"is_acceptable": lambda tensor: False}


def patch(runtime: Runtime) -> dict[str, Any]:
    """Put the tables in ``torch.cuda``, ``torch.accelerator`` and ``torch.backends.cudnn`` (what this torch has of
    them); returns what they replaced, as ``module.name``, for ``unpatch``."""
    import torch

    saved: dict[str, Any] = {}
    tables = (
        ("cuda", table_for(runtime)),
        ("accelerator", accelerator_table(runtime)),
        ("backends.cudnn", CUDNN_TABLE),
    )
    for module, table in tables:
        target = _module(torch, module)
        for name, value in table.items():
            if target is None or (module != "cuda" and not hasattr(target, name)):
                continue
            saved[f"{module}.{name}"] = getattr(target, name)
            setattr(target, name, value)
    return saved


def unpatch(saved: dict[str, Any]) -> None:
    torch = sys.modules["torch"]
    for key, value in saved.items():
        module, name = key.rsplit(".", 1)
        setattr(_module(torch, module), name, value)


def _module(torch: Any, dotted: str) -> Any:
    """``torch.backends.cudnn`` from ``"backends.cudnn"``; None where this torch lacks it."""
    target = torch
    for part in dotted.split("."):
        target = getattr(target, part, None)
    return target
