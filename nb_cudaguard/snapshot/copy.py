"""Copying a root's state to host memory off the critical path: a side stream, pinned memory, an event.

On a GPU, each device's copies go on a side stream that first waits for the work the cell queued on the current
stream (``wait_stream``: a GPU-side wait, the host does not block), so the copy sees the state the cell left.
``Tensor.to("cpu", non_blocking=True)`` from CUDA allocates its result in pinned memory (ATen's ``_to_copy``) and
returns at once; an event recorded behind the copies tells later whether they are done (``Event.query``, which
never blocks). Before the next cell runs, its stream waits for that event (``order_next_cell``), so no kernel of
the next cell can change a tensor while it is being copied, and ``record_stream`` keeps the caching allocator from
handing a source's memory to anyone before the copy has read it.

Without CUDA (the simulated GPU, whose device tensors are CPU tensors), the same calls run: there is no stream and
the copy is a plain host copy, done when the call returns, and the "event" is complete at once.
"""

from __future__ import annotations

import contextlib
import copy as pycopy
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.snapshot.find import Root

_PLAIN = (int, float, bool, str, type(None))


class NotSnapshotable(ValueError):
    """A root whose state cannot be kept safely (its scheduler holds objects the safe loader would refuse)."""


@dataclass
class RootState:
    """One root's state in host memory; ``state`` holds only dicts, lists, tuples, plain values and CPU tensors, so
    that ``torch.load(weights_only=True)`` reads it back without running any code."""

    path: str
    kind: str
    cls: str  # the qualified name of its class: a rebuilt object of another class is not loaded
    state: Any
    nbytes: int = 0


@dataclass
class Copies:
    """The copies of one snapshot, maybe still in flight."""

    events: list[tuple[int, Any]] = field(default_factory=list)  # (device, CUDA event); none without CUDA
    started: list[Any] = field(default_factory=list)
    host_seconds: float = 0.0

    def done(self) -> bool:
        """Non-blocking; raises the CUDA error if the context was poisoned before the copies finished."""
        return all(event.query() for _, event in self.events)

    def copy_seconds(self) -> float:
        """The copies' own time on the GPU (read once they are done), or the host's time without CUDA."""
        if not self.events:
            return self.host_seconds
        return sum(start.elapsed_time(end) for start, (_, end) in zip(self.started, self.events, strict=True)) / 1000

    def order_next_cell(self) -> None:
        """Make the current streams wait for the copies (GPU-side; the host does not wait)."""
        torch = sys.modules["torch"]
        for index, event in self.events:
            torch.cuda.current_stream(index).wait_event(event)


def real_cuda() -> bool:
    """CUDA is really in use (not the simulated GPU): streams and events exist."""
    torch = sys.modules.get("torch")
    simulation = sys.modules.get("nb_cudaguard.testing")
    simulated = simulation is not None and simulation.is_enabled()
    return torch is not None and not simulated and torch.cuda.is_initialized()


class Copier:
    """Copies roots' tensors to the host, per device on a side stream when CUDA is real."""

    def __init__(self) -> None:
        self._streams: dict[int, Any] = {}
        self.copies = Copies()
        self._begun = 0.0

    @contextlib.contextmanager
    def batch(self) -> Iterator[Copies]:
        """Everything copied inside belongs to one snapshot; on exit an event is recorded behind it per stream."""
        torch = sys.modules["torch"]
        self.copies = Copies()
        self._begun = time.perf_counter()
        cuda = real_cuda()
        if cuda:
            for index, stream in self._streams.items():
                stream.wait_stream(torch.cuda.current_stream(index))
            for stream in self._streams.values():
                start = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                self.copies.started.append(start)
        yield self.copies
        if cuda:
            for index, stream in self._streams.items():
                end = torch.cuda.Event(enable_timing=True)
                end.record(stream)
                self.copies.events.append((index, end))
        self.copies.host_seconds = time.perf_counter() - self._begun

    def prepare(self, roots: list[Root]) -> None:
        """Create the side streams of the devices the roots are on, before ``batch`` starts."""
        torch = sys.modules["torch"]
        if not real_cuda():
            return
        from nb_cudaguard.snapshot.find import tensors_of

        for root in roots:
            for tensor in tensors_of(root):
                if tensor.is_cuda and tensor.device.index not in self._streams:
                    self._streams[tensor.device.index] = torch.cuda.Stream(tensor.device)

    def to_host(self, tensor: Any) -> Any:
        """A host copy of ``tensor``: pinned and asynchronous from a GPU, on its device's side stream."""
        torch = sys.modules["torch"]
        if not tensor.is_cuda:
            return tensor.detach().clone()
        stream = self._streams.get(tensor.device.index)
        if stream is None:  # the simulated GPU: a plain host copy
            return tensor.detach().to("cpu", non_blocking=True, copy=True)
        with torch.cuda.stream(stream):
            host = tensor.detach().to("cpu", non_blocking=True, copy=True)
        tensor.record_stream(stream)
        return host

    def capture(self, root: Root) -> RootState:
        """The root's state on the host. Raises ``NotSnapshotable`` for state the safe loader would refuse."""
        obj = root.obj
        cls = f"{type(obj).__module__}.{type(obj).__qualname__}"
        if root.kind == "module":
            tensors = {name: self.to_host(t) for name, t in obj.state_dict(keep_vars=True).items()}
            modes = [m.training for m in obj.modules()]
            state: Any = {"tensors": tensors, "training": modes}
        elif root.kind == "optimizer":
            state = self._tree(obj.state_dict())
        elif root.kind == "scheduler":
            state = plain(obj.state_dict(), root.path)
        elif root.kind == "scaler":
            state = {
                name: (self.to_host(value) if value is not None and not isinstance(value, _PLAIN) else value)
                for name, value in vars(obj).items()
                if name in _SCALER_FIELDS
            }
        else:
            state = {"tensor": self.to_host(obj), "stride": tuple(obj.stride())}
        return RootState(root.path, root.kind, cls, state, nbytes(state))

    def _tree(self, value: Any) -> Any:
        torch = sys.modules["torch"]
        if isinstance(value, torch.Tensor):
            return self.to_host(value)
        if isinstance(value, dict):
            return {key: self._tree(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._tree(item) for item in value)
        return value


# GradScaler's own state: its scale and growth tracker (tensors on the device once used) and its settings.
_SCALER_FIELDS = frozenset(
    {"_scale", "_growth_tracker", "_init_scale", "_growth_factor", "_backoff_factor", "_growth_interval",
     "_init_growth_tracker", "_enabled", "_device"}
)  # fmt: skip


def plain(value: Any, where: str) -> Any:
    """A deep copy of plain data (what a scheduler's ``state_dict`` holds); anything else is refused, since the new
    process reads snapshots with ``weights_only=True``, which runs no code and loads only such data."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return {key: plain(item, where) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(item, where) for item in value)
    raise NotSnapshotable(f"{where} holds a {type(value).__name__}, which a snapshot does not keep")


def nbytes(value: Any) -> int:
    torch = sys.modules["torch"]
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, dict):
        return sum(nbytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes(item) for item in value)
    return 0


def rng_states() -> dict[str, Any]:
    """The random number generators a replayed cell draws from, as they are now: torch's CPU generator, each CUDA
    device's (host-side seed and offset, no synchronisation), NumPy's global one and Python's."""
    torch = sys.modules["torch"]
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": pycopy.deepcopy(random.getstate())}
    if real_cuda():
        states["cuda"] = list(torch.cuda.get_rng_state_all())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, position, has_gauss, cached = numpy.random.get_state()
        states["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), int(position), int(has_gauss), float(cached))
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch = sys.modules["torch"]
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy

        kind, keys, position, has_gauss, cached = states["numpy"]
        numpy.random.set_state((kind, keys.numpy().astype("uint32"), position, has_gauss, cached))
