"""The fast mode's device-side flag: one small tensor per device, written by the checks, read once per cell.

A check never asks the host whether it fired: reading one number back would synchronise the device, drain the
launch queue that keeps a GPU busy, and break a CUDA graph capture. Instead each check folds its verdict into its
device's board with a few tensor ops on the op's own stream::

    board = [count, first value, first flat position, tag]       (float64, zero until a check fires)

``tag`` is ``site * 2**36`` (the site: which op, argument and user line, a small integer given on the host when
the op was dispatched). A check writes its record only while ``tag`` is 0, and a count is never near 2**36, so
``count > tag`` is exactly "this check fired and nothing fired before it": the first firing on a device sticks,
later ones change nothing. The board is read with one transfer per device when the cell ends
(:meth:`Board.read`) and zeroed in place, so a board's address never changes (a captured CUDA graph or a compiled
graph that took it as an input keeps writing to the same tensor).

float64 holds every index below 2**53 and every probability exactly, NaN included, so one dtype serves both.

A check's verdict is computed at once (its mask of bad values, on the op's own arguments), written into the
device's mask buffer (:meth:`Board.hold_ne`: a view of one preallocated bool tensor, so a held mask is no allocation of
its own), and folding it into the board waits: up to ``HOLD_ENTRIES`` held checks are folded
together, with a fixed number of tensor ops whatever their number (``fast.batch.fold_batch``), when the buffer or
the list is full; at the cell's end they are not folded at all unless one fired (one ``any()`` over the buffer
travels with the board's read). Why: a fold is about ten small tensor ops, and one per check was most of the fast
mode's cost on a small step (docs/performance.md). Held are the input and the mask (at most ``HOLD_ELEMENTS``
elements in all, so memory stays small); an input changed in place before its fold (a reused batch buffer) is
caught by its version counter, and its value is then reported as unknown rather than read from what the buffer
holds by then. Under ``torch.compile`` and during a CUDA graph capture the fold is immediate (it must be in the
graph), and so is the fold of an input too large to hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from nb_cudaguard.check.fast.batch import Held, Layouts, fold_batch
from nb_cudaguard.check.fast.known import KNOWN

TAG_UNIT = 2**36  # counts stay below it; sites stay below 2**16, so tags stay exact in float64
STALE = 2**35  # added to a tag: the input changed in place before its fold, so the value read is not its value
MAX_SITES = 2**16 - 1
HOLD_ENTRIES = 256  # checks whose folds wait before they are folded together
HOLD_ELEMENTS = 1 << 18  # elements held in all (inputs and masks); a larger input is folded at once
SLOT_VIEWS = 4096  # views of the mask buffers kept for reuse


@dataclass(frozen=True)
class Firing:
    """What a board says after a cell: the first check that fired on one device."""

    device: str
    site: int
    count: int
    value: float
    flat_position: int
    value_known: bool = True  # False: the input was changed in place before the fold (a reused buffer)


class _Buffer:
    """A device's held masks, one after another in call order, in one bool tensor made once."""

    def __init__(self, device) -> None:
        self.masks = torch.zeros(HOLD_ELEMENTS, dtype=torch.bool, device=device)
        self.used = 0
        self._views: dict[tuple, Any] = {}  # (offset, shape) -> that view of the buffer

    def slot(self, shape, n: int) -> Any:
        """The next ``n`` elements as a contiguous tensor of ``shape``, now in use. A training loop asks for the
        same few every step, so each view is made once."""
        used = self.used
        found = self._views.get((used, shape))
        if found is None:
            if len(self._views) >= SLOT_VIEWS:
                self._views.clear()
            found = self._views[used, shape] = self.masks.as_strided(shape, _contiguous_strides(shape), used)
        self.used = used + n
        return found


class Board:
    """The boards of every device the checks met, and whether the checks are on at all.

    ``suspended`` is raised while an exact-mode ``Checker`` is active: the exact mode then sees every op's real
    arguments and raises before the op runs, so the fast checks step aside instead of clamping underneath it.
    """

    def __init__(self) -> None:
        self.tensors: dict[Any, Any] = {}
        self._tags: dict[tuple[Any, Any, int], Any] = {}
        self.active = 0  # FastChecker entries holding the patches in place
        self.suspended = 0
        self.checks = 0  # checks run in eager mode since the process started (the benchmarks read it)
        self._waiting: list[tuple[int, Any, int, Any, int]] = []  # (site, input, numel, device, version), call order
        self._buffers: dict[Any, _Buffer] = {}  # by device: the held masks, one after another
        self.layouts = Layouts()

    def state(self, device) -> Any:
        found = self.tensors.get(device)
        if found is None:
            found = torch.zeros(4, dtype=torch.float64, device=device)
            self.tensors[device] = found
        return found

    def prepare(self) -> None:
        """Boards for the CPU and for every CUDA device already in use, made before any check runs: then a CUDA
        graph capture or a compiled graph finds its board ready instead of allocating it while capturing."""
        self.state(torch.device("cpu"))
        if torch.cuda.is_initialized():
            for index in range(torch.cuda.device_count()):
                self.state(torch.device("cuda", index))

    def tag(self, site: int, x) -> Any:
        """The 0-d tag tensor of a site for ``x``'s device and record dtype (int64 for int64 values, else
        float64), made once: a fill on that device, never a host copy."""
        dtype = torch.int64 if x.dtype == torch.int64 else torch.float64
        key = (x.device, dtype, site)
        found = self._tags.get(key)
        if found is None:
            found = torch.full((), site * TAG_UNIT, dtype=dtype, device=x.device)
            self._tags[key] = found
        return found

    def hold_ne(self, site: int, x, safe) -> bool:
        """Hold ``safe != x`` as the verdict of ``x``, an integer tensor (so it needs no ``detach``), written straight
        into its device's mask buffer (one op, no allocation): its fold waits, in call order (so the first firing
        still sticks). False where it cannot wait (nothing done then). The hot path of every index check: on a new
        batch it runs cold, after the step's own work, where each tensor attribute read costs about 2 µs
        (docs/performance.md), so it reads four: an inference tensor is told by its version counter's refusal."""
        n = x.numel()
        if n > HOLD_ELEMENTS:
            return False
        try:
            version = x._version
        except RuntimeError:  # made under torch.inference_mode: no version counter to see an in-place change by
            return False
        device = x.device
        if device.type == "cuda" and capturing():
            return False
        buffer = self._buffers.get(device) or self._buffer(device)
        if buffer.used + n > HOLD_ELEMENTS or len(self._waiting) >= HOLD_ENTRIES:
            self._fold_all(self._take())  # mid-cell: a buffer or the list is full
        _ne(safe, x, out=buffer.slot(x.shape, n))
        self.checks += 1
        self._waiting.append((site, x, n, device, version))
        return True

    def defer(self, site: int, x, bad) -> None:
        """Fold ``bad`` (shaped like ``x``) later where it can wait (copied into the mask buffer), at once where
        not: during a CUDA graph capture (the fold must be in the graph), for an input too large to hold, or one
        without a version counter (made under ``torch.inference_mode``), whose in-place change could not be seen;
        then after the checks held before it, so that the first firing still sticks."""
        n = x.numel()
        self.checks += 1
        if n > HOLD_ELEMENTS or x.is_inference() or (x.is_cuda and capturing()):
            if self._waiting:
                self._fold_all(self._take())
            fold(site, x.detach(), bad, self.tag(site, x))
            return
        device = x.device
        buffer = self._buffers.get(device) or self._buffer(device)
        if buffer.used + n > HOLD_ELEMENTS or len(self._waiting) >= HOLD_ENTRIES:
            self._fold_all(self._take())
        buffer.slot(x.shape, n).copy_(bad)
        self._waiting.append((site, x.detach() if x.requires_grad else x, n, device, x._version))

    def _buffer(self, device) -> _Buffer:
        found = self._buffers[device] = _Buffer(device)
        return found

    def _take(self) -> list[tuple[int, Any, int, Any, int]]:
        """The held checks, in call order; none are held after (their masks stay in the buffers until the next
        check writes there), so the tensors ``fast.known`` noted while they were held may now be freed."""
        KNOWN.released()
        waiting, self._waiting = self._waiting, []
        for buffer in self._buffers.values():
            buffer.used = 0
        return waiting

    def _by_device(self, entries: list[tuple[int, Any, int, Any, int]]) -> dict[Any, list[Held]]:
        """The entries per device, as ``fast.batch`` takes them; a changed input's tag says so (``STALE``)."""
        found: dict[Any, list[Held]] = {}
        for site, x, n, device, version in entries:
            tag = site * TAG_UNIT + (STALE if x._version != version else 0)
            found.setdefault(device, []).append((tag, x, n))
        return found

    def _masks(self, device, held: list[Held]) -> Any:
        return self._buffers[device].masks.narrow(0, 0, sum(n for _, _, n in held))

    def _fold_all(self, entries: list[tuple[int, Any, int, Any, int]]) -> None:
        """Their folds, in the order the checks ran, each device's in one batch."""
        for device, held in self._by_device(entries).items():
            fold_batch(self.state(device), self._masks(device, held), held, self.layouts)

    def read(self) -> list[Firing]:
        """Every device's first firing: one device-to-host transfer per board (the cell's one synchronisation).

        The checks still held are not folded first: whether any of them fired travels with the board, as one more
        number reduced from their masks, and only if one did (the cell has failed; a second read costs nothing
        that matters then) are they folded, in order, to find the first."""
        entries = self._take()
        sizes: dict[Any, int] = {}  # held elements by device (one device, nearly always)
        for entry in entries:
            sizes[entry[3]] = sizes.get(entry[3], 0) + entry[2]
        firings = []
        for device in {**self.tensors, **sizes}:
            state = self.state(device)
            if device in sizes:
                masks = self._buffers[device].masks.narrow(0, 0, sizes[device])
                fired = masks.any(0, keepdim=True)
                count, value, position, tag, held_fired = torch.cat([state, fired]).tolist()  # bool -> float64
                if held_fired and not tag:
                    fold_batch(state, masks, self._by_device(entries)[device], self.layouts)
                    count, value, position, tag = state.tolist()
            else:
                count, value, position, tag = state.tolist()
            if tag:
                site, rest = divmod(int(tag), TAG_UNIT)
                known = rest < STALE
                firings.append(
                    Firing(str(device), site, int(count), value if known else math.nan, int(position), known)
                )
        return firings

    def reset(self) -> None:
        """After a read that found a firing: the board zeroed, and no verdict of this epoch is reused."""
        KNOWN.clear()
        self._take()
        for state in self.tensors.values():
            state.zero_()


BOARD = Board()


_ne = torch.ne


def capturing() -> bool:
    """Whether a CUDA graph is being captured (asked of a CUDA tensor only, and only once CUDA started)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def fold(site: int, x, bad, tag=None, stale: bool = False) -> None:
    """Record ``bad`` (a boolean tensor shaped like ``x``) on ``x``'s board, without reading anything back.

    Eight tensor ops: the count, the first offending position (``max`` over a boolean returns the first True),
    the value there, the record, and one ``where`` into the board, whose ``count > tag`` test keeps the first
    firing. The record is stacked from one dtype (a mixed ``stack`` costs three times as much on the CPU): int64
    for int64 indices, float64 for the rest. Under ``torch.compile`` the same ops are traced into the graph and
    the board is a mutated input.
    """
    flat = bad.reshape(-1)
    count = flat.sum()
    position = flat.max(0)[1]
    value = torch._C.TensorBase.gather(x.reshape(-1), 0, position.reshape(1)).reshape(())
    exact = x.dtype == torch.int64
    if tag is None:
        tag = torch.full((), site * TAG_UNIT, dtype=torch.int64 if exact else torch.float64, device=x.device)
    if stale:
        tag = tag + STALE
    if exact:
        record = torch.stack([count, value, position, tag])
    else:
        record = torch.stack([count.double(), value.double(), position.double(), tag])
    state = BOARD.state(x.device)
    torch.where(count > state.select(0, 3), record, state, out=state)
