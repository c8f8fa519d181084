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

A check's verdict is computed at once (its mask of bad values, on the op's own arguments), but folding it into the
board waits (:meth:`Board.defer`): the folds of up to ``HOLD_ENTRIES`` checks run together, at the cell's end or when
that many are held. Why: a fold is about ten small tensor ops, and run one at a time between the training step's
own ops each one finds the CPU's caches cold (about 100 µs a fold on a small step instead of 34 µs in a row); a
launch-bound step spent most of the fast mode's cost there (docs/performance.md). Held are the input and the mask
(at most ``HOLD_ELEMENTS`` elements in all, so memory stays small); an input changed in place before its fold (a
reused batch buffer) is caught by its version counter, and its value is then reported as unknown rather than read
from what the buffer holds by then. Under ``torch.compile`` and during a CUDA graph capture the fold is immediate
(it must be in the graph), and so is the fold of an input too large to hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

TAG_UNIT = 2**36  # counts stay below it; sites stay below 2**16, so tags stay exact in float64
STALE = 2**35  # added to a tag: the input changed in place before its fold, so the value read is not its value
MAX_SITES = 2**16 - 1
HOLD_ENTRIES = 64  # checks whose folds wait before they are folded together
HOLD_ELEMENTS = 1 << 18  # elements held in all (inputs and masks); a larger input is folded at once


@dataclass(frozen=True)
class Firing:
    """What a board says after a cell: the first check that fired on one device."""

    device: str
    site: int
    count: int
    value: float
    flat_position: int
    value_known: bool = True  # False: the input was changed in place before the fold (a reused buffer)


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
        self._waiting: list[tuple[int, Any, Any, int]] = []  # (site, input, mask, input's version) in call order
        self._held = 0

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

    def defer(self, site: int, x, bad) -> None:
        """Fold ``bad`` (shaped like ``x``, a detached input) later, in call order (so the first firing still
        sticks); at once where it cannot wait: during a CUDA graph capture (the fold must be in the graph), for an
        input too large to hold, or one without a version counter (made under ``torch.inference_mode``), whose
        in-place change could not be seen. Capturing is asked only of a started CUDA: a tensor that merely says
        ``cuda`` (a fake tensor on a CPU-only torch, a CUDA build without a driver) has no stream to ask about."""
        capturing = x.is_cuda and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()
        if capturing or bad.numel() > HOLD_ELEMENTS or x.is_inference():
            fold(site, x, bad, self.tag(site, x))
            return
        self._waiting.append((site, x, bad, x._version))
        self._held += bad.numel()
        if len(self._waiting) >= HOLD_ENTRIES or self._held >= HOLD_ELEMENTS:
            self._fold_all(self._take())  # mid-cell: too many held

    def _take(self) -> list[tuple[int, Any, Any, int]]:
        """The held checks, in call order; none are held after."""
        waiting, self._waiting, self._held = self._waiting, [], 0
        return waiting

    def _fold_all(self, entries: list[tuple[int, Any, Any, int]]) -> None:
        """Their folds, in the order the checks ran; a changed input's record says so (``STALE``)."""
        for site, x, bad, version in entries:
            fold(site, x, bad, self.tag(site, x), stale=x._version != version)

    def read(self) -> list[Firing]:
        """Every device's first firing: one device-to-host transfer per board (the cell's one synchronisation).

        The checks still held are not folded first: whether any of them fired travels with the board, as one more
        number reduced from their masks, and only if one did (the cell has failed; a second read costs nothing
        that matters then) are they folded, in order, to find the first."""
        held: dict[Any, list[tuple[int, Any, Any, int]]] = {}
        for entry in self._take():
            held.setdefault(entry[2].device, []).append(entry)
        firings = []
        for device in {**self.tensors, **held}:
            state = self.state(device)
            entries = held.get(device)
            if entries:
                fired = torch.cat([bad.reshape(-1) for _, _, bad, _ in entries]).any(0, keepdim=True)
                count, value, position, tag, held_fired = torch.cat([state, fired]).tolist()  # bool -> float64
                if held_fired and not tag:
                    self._fold_all(entries)
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
        self._take()
        for state in self.tensors.values():
            state.zero_()


BOARD = Board()


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
