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
the user's line, needed only to report a failure), nothing held but a weak reference (below). That is only a
faster *success* path: anything else (a value out of range, a possible NaN cast, a device tensor without a
readable source, a CUDA graph being captured, whose graph must hold the check) goes on to the deferred path, which
reports at the cell's end exactly as before. Measured cold, after a training step's own work, this is one op where
the deferred path runs two or four plus its bookkeeping (docs/performance.md, issue 32, step 9).

A loss's ``ignore_index`` (-100 by default; 255 in segmentation) lies outside the range, so when the least or
greatest value is outside it, a second, exact look reads them again with the ignored targets set to a valid value.

The same tensor read valid twice against the same range is not read again while it is unchanged (:data:`VALID`,
:func:`again`): a batch passed to every step (overfitting one batch, a fixed batch while debugging, an evaluation
set) then costs a lookup, not a read. A first read notes the tensor's id only (:data:`SEEN`: a loader's new batch,
read once, costs a dict entry and nothing made); a second read of the same id keeps a weak reference to it (an id
alone could be a new tensor at a freed one's address: a weak reference never is, and keeps nothing alive), with
its version counter and data pointer, and from then on it is trusted while both are those of that read.
What this cannot see, as ``fast.known`` cannot: a write to its memory that its version counter does not count
(through a ``.data`` alias, another tensor ``set_`` on its storage, a DLPack view of device memory).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from nb_cudaguard.check.fast.board import capturing
from nb_cudaguard.check.fast.casts import CASTS
from nb_cudaguard.record.copies import COPIES, owned_by_torch

_aminmax = torch.aminmax
_ref = weakref.ref
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
    """Checks answered here since the process started (the benchmarks count them with the board's): read valid,
    and of those answered by an earlier read of the same unchanged tensor (:data:`VALID`)."""

    valid: int = 0
    again: int = 0


READS = Reads()
LIMIT = 16  # ranges remembered; past it, all are forgotten (a model checks a handful of ranges a step)
SEEN: dict[tuple, int] = {}  # (low, high, ignore) -> the id of the last index read valid
VALID: dict[tuple, list] = {}  # (low, high, ignore) -> [a weak reference to the index, version, data pointer, owned]


def forget() -> None:
    """The checks went off: what they read is not known to hold when they come back on."""
    SEEN.clear()
    VALID.clear()


def again(index, low: int, high: int, ignore: int | None) -> bool:
    """Whether ``index`` is the tensor last read valid against this range, unchanged since (the same version counter
    and data pointer), and may be trusted: a CPU tensor if its memory is PyTorch's own (a write through NumPy bumps
    no counter; asked once per entry, since asking makes an object for the storage), a device tensor unless a CUDA
    graph is being captured (its replays would run without the check). Eager mode only: the caller has asked
    ``compiling()`` (Dynamo would guard on this table's contents)."""
    last = VALID.get((low, high, ignore))
    if last is None or last[0]() is not index or last[1] != index._version or last[2] != index.data_ptr():
        return False
    if index.is_cpu:
        if last[3] is None:
            last[3] = owned_by_torch(index)
        if not last[3]:
            return False
    elif capturing():
        return False
    READS.again += 1
    return True


def in_range(index, low: int, high: int, ignore: int | None) -> bool:
    """Whether ``index`` (an integer tensor, eager mode) was read here, with no synchronisation, and every value is
    in ``[low, high)`` or equal to ``ignore``; if so, it is remembered for :func:`again`. False says nothing about
    its values: it is then checked on the deferred path. Never reads a device tensor's values."""
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
    except RuntimeError:  # empty; a dtype or layout these ops do not take (sparse, uint32); a too wide ignore_index
        return False
    READS.valid += 1
    key, number = (low, high, ignore), id(index)
    if SEEN.get(key) != number:  # a loader's new batch, never checked again: its id, nothing made
        if len(SEEN) >= LIMIT:
            SEEN.clear()
        SEEN[key] = number
    else:  # read valid a second time (or a new tensor at the last one's address): trusted while unchanged
        if len(VALID) >= LIMIT:
            VALID.clear()
        VALID[key] = [_ref(index), index._version, index.data_ptr(), None]
    return True
