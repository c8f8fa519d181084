"""An index whose values the host can read without a synchronisation is read at once: one host op, and no more.

The fast checks' deferred path (a clamp, a mask written into the board, folded and read at the cell's end, and
``fast.known`` to skip a tensor checked before) exists because reading a GPU tensor's values makes the host wait
for the device. Two kinds of index tensor cost no such wait:

* a CPU tensor (a script or a notebook debugging on the CPU): its values are in host memory;
* a device tensor copied from the host and unchanged since (``xb, yb = xb.to(device), yb.to(device)``: how a
  ``DataLoader``'s batch reaches the GPU): ``record.copies`` saw the copy and returns the host tensor while both
  version counters and data pointers are those of the copy, and the host memory is PyTorch's own (NumPy could
  write to shared memory without a version bump), so the host tensor's values are the device tensor's.

For those, :func:`in_range` reads the least and greatest value (``aminmax``, one op over host memory) and compares
them to the range in Python. Valid, the op runs on its own arguments: no clamp, no board, no site (the site names
the user's line, needed only to report a failure), nothing kept. That is only a faster *success* path: anything
else (a value out of range, a possible NaN cast, a device tensor without a readable source, a CUDA graph being
captured, whose graph must hold the check) goes on to the deferred path, which reports at the cell's end exactly as
before. Measured cold, after a training step's own work, this is one op where the deferred path runs two or four
plus its bookkeeping (docs/performance.md, issue 32, step 9).

A loss's ``ignore_index`` (-100 by default; 255 in segmentation) lies outside the range, so when the least or
greatest value is outside it, a second, exact look reads them again with the ignored targets set to a valid value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nb_cudaguard.check.fast.board import capturing
from nb_cudaguard.check.fast.casts import CASTS
from nb_cudaguard.record.copies import COPIES

_aminmax = torch.aminmax
_CPU = torch.device("cpu")
_OUT: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # by dtype: two values, two views


def _bounds(host) -> list[int]:
    """The least and greatest value of ``host``, a CPU tensor: one op, written into a two-element buffer made once
    per dtype (no allocation), read with ``tolist`` (which reads host memory without a dispatch; two ``.item()``
    are two). The buffer is shared, as the board's are: the checks run in the thread that calls the ops."""
    out = _OUT.get(host.dtype)
    if out is None:
        with torch.inference_mode(False):  # a normal tensor even if made under inference_mode: usable outside it
            values = torch.empty(2, dtype=host.dtype, device=_CPU)  # explicit: the default device may be CUDA
            out = _OUT[host.dtype] = (values, values[0], values[1])
    _aminmax(host, out=(out[1], out[2]))
    return out[0].tolist()


@dataclass
class Reads:
    """Checks answered here since the process started (the benchmarks count them with the board's)."""

    valid: int = 0


READS = Reads()


def in_range(index, low: int, high: int, ignore: int | None) -> bool:
    """Whether ``index`` (a plain integer tensor, eager mode) was read here, with no synchronisation, and every
    value is in ``[low, high)`` or equal to ``ignore``. False says nothing about its values: it is then checked on
    the deferred path. Never reads a device tensor's values."""
    if index.is_cpu:
        host = index
    else:
        if not COPIES._by_id:
            return False
        host = COPIES.source_of(index, owned=True)
        if host is None or capturing():
            return False
    if CASTS._by_id and CASTS.lookup(index) is not None:
        return False  # made from a float tensor under the checks: its NaNs became in-range values on CUDA
    try:
        least, most = _bounds(host)
        if not (low <= least and most < high):
            if ignore is None or low <= ignore < high:
                return False
            least, most = _bounds(host.masked_fill(host.eq(ignore), low))
            if not (low <= least and most < high):
                return False
    except RuntimeError:  # a dtype or layout these ops do not take (sparse, uint32), an ignore_index it cannot hold
        return False
    READS.valid += 1
    return True
