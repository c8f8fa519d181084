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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

TAG_UNIT = 2**36  # counts stay below it; sites stay below 2**16, so tags stay exact in float64
MAX_SITES = 2**16 - 1


@dataclass(frozen=True)
class Firing:
    """What a board says after a cell: the first check that fired on one device."""

    device: str
    site: int
    count: int
    value: float
    flat_position: int


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

    def read(self) -> list[Firing]:
        """Every device's first firing: one device-to-host transfer per board (the cell's one synchronisation)."""
        firings = []
        for device, state in list(self.tensors.items()):
            count, value, position, tag = state.tolist()
            if tag:
                firings.append(Firing(str(device), int(tag // TAG_UNIT), int(count), value, int(position)))
        return firings

    def reset(self) -> None:
        for state in self.tensors.values():
            state.zero_()


BOARD = Board()


def fold(site: int, x, bad, tag=None) -> None:
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
    if exact:
        record = torch.stack([count, value, position, tag])
    else:
        record = torch.stack([count.double(), value.double(), position.double(), tag])
    state = BOARD.state(x.device)
    torch.where(count > state.select(0, 3), record, state, out=state)
