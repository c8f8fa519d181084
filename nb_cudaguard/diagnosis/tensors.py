"""One-line tensor summaries and range checks whose cost does not grow with the tensor.

The diagnosis runs right after a failure, in the user's process, often next to multi-gigabyte tensors, and
sometimes with a poisoned CUDA context. So: values are read only where that is safe (CPU tensors and NumPy
arrays always, CUDA tensors only while the context is healthy, meta tensors never), a rule decided from metadata
alone (``.device``), so a poisoned device is never touched; a tensor larger than ``EXACT_LIMIT`` elements is read
through a strided view of at most ``SAMPLE_LIMIT`` elements (no copy of the whole); and every read runs inside
``probe.internal_use()``, which opens nothing: the simulated GPU of ``nb_cudaguard.testing`` refuses the
extension's reads of a poisoned device exactly as it refuses the user's, and counts them, so a test can prove
that none is attempted.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.incident.probe import internal_use

EXACT_LIMIT = 1 << 22  # elements read exactly (index and label tensors are almost always far smaller)
SAMPLE_BLOCKS, SAMPLE_BLOCK = 128, 256  # a larger tensor is read as 128 evenly spaced runs of 256 elements
# (32,768 elements: below ATen's parallel grain, so a summary never waits on the intra-op thread pool)
SAMPLE_LIMIT = SAMPLE_BLOCKS * SAMPLE_BLOCK
SHOWN = 5  # offending values and positions quoted in a report
INT64_MIN = -(2**63)  # what a NaN becomes when cast to an integer index on CPU and on CUDA


def is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def is_array(obj: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray)


def is_array_like(obj: Any) -> bool:
    return is_tensor(obj) or is_array(obj)


def device_of(obj: Any) -> str:
    return str(obj.device) if is_tensor(obj) else "cpu"


def dtype_of(obj: Any) -> str:
    return str(obj.dtype).replace("torch.", "")


def shape_of(obj: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in obj.shape)


def is_integral(obj: Any) -> bool:
    if is_tensor(obj):
        return not obj.dtype.is_floating_point and not obj.dtype.is_complex and obj.dtype != _torch().bool
    return obj.dtype.kind in "iu"


def is_floating(obj: Any) -> bool:
    if is_tensor(obj):
        return obj.dtype.is_floating_point
    return obj.dtype.kind == "f"


def _torch():
    return sys.modules["torch"]


def readable(obj: Any, health_state: str) -> tuple[bool, str]:
    """Whether reading values is safe now, and if not, why (said in the report, so the user knows what was inferred)."""
    if is_array(obj):
        return True, ""
    kind = obj.device.type
    if kind == "cpu":
        return True, ""
    if kind == "meta":
        return False, "a meta tensor has no values"
    if health_state == "healthy":
        return True, ""
    return False, f"the CUDA context is {health_state}"  # said after the device: "cuda:0 (values not read: ...)"


def _strided_view(obj: Any, limit: int):
    """A view (never a copy) holding at most about ``limit`` elements spread over the whole tensor."""
    view = obj
    while _numel(view) > limit:
        sizes = list(view.shape)
        dim = max(range(len(sizes)), key=sizes.__getitem__)
        step = max(2, math.ceil(_numel(view) / limit))
        step = min(step, sizes[dim]) if sizes[dim] > 1 else 1
        if step <= 1:
            break
        index = [slice(None)] * len(sizes)
        index[dim] = slice(None, None, step)
        view = view[tuple(index)]
    return view


def _sample(obj: Any):
    """At most SAMPLE_LIMIT elements as a contiguous copy: runs of adjacent elements touch few pages and cache lines."""
    if is_tensor(obj) and obj.is_contiguous():
        flat = obj.detach().view(-1)
        stride = flat.numel() // SAMPLE_BLOCKS
        return flat.as_strided((SAMPLE_BLOCKS, SAMPLE_BLOCK), (stride, 1)).contiguous().reshape(-1)
    if is_array(obj) and obj.flags.c_contiguous:
        flat = obj.reshape(-1)
        stride = flat.size // SAMPLE_BLOCKS
        return sys.modules["numpy"].concatenate(
            [flat[i * stride : i * stride + SAMPLE_BLOCK] for i in range(SAMPLE_BLOCKS)]
        )
    view = _strided_view(obj, SAMPLE_LIMIT)
    return view.contiguous() if is_tensor(view) else sys.modules["numpy"].ascontiguousarray(view)


def _numel(obj: Any) -> int:
    return int(obj.numel()) if is_tensor(obj) else int(obj.size)


def _flat_values(obj: Any, limit: int):
    """Flat CPU values (torch or NumPy), and whether they are a sample."""
    sampled = _numel(obj) > limit
    view = _sample(obj) if sampled else obj
    if is_tensor(view):
        view = view.detach()
        if view.device.type != "cpu":
            view = view.cpu()
    return view.reshape(-1), sampled


@dataclass
class TensorSummary:
    """Shape, dtype, device and, where safe, min/max, NaN/inf counts and a few distinct values."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    readable: bool
    why_not: str = ""
    min: float | int | None = None
    max: float | int | None = None
    nan: int | None = None
    inf: int | None = None
    distinct: list = field(default_factory=list)
    distinct_count: int | None = None
    sampled: bool = False

    def to_text(self) -> str:
        shape = "[" + ", ".join(str(s) for s in self.shape) + "]"
        parts = [f"{shape} {self.dtype} {self.device}"]
        if not self.readable:
            parts.append(f"(values not read: {self.why_not})")
            return " ".join(parts)
        if self.numel == 0:
            parts.append("empty")
            return " ".join(parts)
        approx = "~" if self.sampled else ""
        if self.min is not None:
            parts.append(f"min={_fmt(self.min)} max={_fmt(self.max)}")
        if self.nan:
            parts.append(f"nan={approx}{self.nan}")
        if self.inf:
            parts.append(f"inf={approx}{self.inf}")
        if self.distinct:
            more = "" if self.distinct_count is None or self.distinct_count <= len(self.distinct) else ", ..."
            parts.append("values {" + ", ".join(_fmt(v) for v in self.distinct) + more + "}")
        if self.sampled:
            parts.append(f"(sampled {SAMPLE_LIMIT:,} of {self.numel:,})")
        return " ".join(parts)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _py(value):
    item = value.item() if hasattr(value, "item") else value
    return item


def summarize(obj: Any, health_state: str = "unknown") -> TensorSummary:
    ok, why = readable(obj, health_state)
    summary = TensorSummary(shape_of(obj), dtype_of(obj), device_of(obj), _numel(obj), ok, why)
    if not ok or summary.numel == 0 or dtype_of(obj) in ("bool", "complex64", "complex128"):
        return summary
    with internal_use():
        flat, summary.sampled = _flat_values(obj, EXACT_LIMIT)
        if is_tensor(flat):
            _fill_from_torch(summary, flat)
        else:
            _fill_from_numpy(summary, flat)
    return summary


def _fill_from_torch(summary: TensorSummary, flat) -> None:
    torch = _torch()
    with torch.no_grad():
        if flat.dtype.is_floating_point:
            nan_mask = torch.isnan(flat)
            inf_mask = torch.isinf(flat)
            summary.nan = int(nan_mask.sum())
            summary.inf = int(inf_mask.sum())
            finite = flat[~(nan_mask | inf_mask)] if summary.nan or summary.inf else flat
            if finite.numel():
                summary.min, summary.max = float(finite.min()), float(finite.max())
        else:
            summary.min, summary.max = int(flat.min()), int(flat.max())
            if summary.max - summary.min < 1 << 20:
                values = torch.unique(flat)
                summary.distinct_count = int(values.numel())
                summary.distinct = [int(v) for v in values[:8]]


def _fill_from_numpy(summary: TensorSummary, flat) -> None:
    numpy = sys.modules["numpy"]
    if flat.dtype.kind == "f":
        nan_mask = numpy.isnan(flat)
        inf_mask = numpy.isinf(flat)
        summary.nan = int(nan_mask.sum())
        summary.inf = int(inf_mask.sum())
        finite = flat[~(nan_mask | inf_mask)]
        if finite.size:
            summary.min, summary.max = float(finite.min()), float(finite.max())
    elif flat.dtype.kind in "iu":
        summary.min, summary.max = int(flat.min()), int(flat.max())
        values = numpy.unique(flat)
        summary.distinct_count = int(values.size)
        summary.distinct = [int(v) for v in values[:8]]


@dataclass
class OutOfRange:
    """Which elements break ``low <= x < high`` (or ``<= high`` when inclusive), the first few of them and how many."""

    count: int
    values: list
    positions: list
    sampled: bool
    nan: int = 0

    def describe(self, name: str) -> str:
        shown = ", ".join(f"{name}{list(p)}={_fmt(v)}" for p, v in zip(self.positions, self.values, strict=False))
        if not shown:
            shown = ", ".join(_fmt(v) for v in self.values)
        more = f" and {self.count - len(self.values)} more" if self.count > len(self.values) else ""
        approx = " (in a sample)" if self.sampled else ""
        return f"{shown}{more}{approx}"


def outside(
    obj: Any,
    low: float | None,
    high: float | None,
    *,
    inclusive: bool = False,
    ignore: float | None = None,
    health_state: str = "unknown",
) -> OutOfRange | None:
    """Elements outside the range, or None when the values cannot be read safely. NaN counts as outside."""
    ok, _ = readable(obj, health_state)
    if not ok:
        return None
    with internal_use():
        if is_tensor(obj):
            return _outside_torch(obj, low, high, inclusive, ignore)
        return _outside_numpy(obj, low, high, inclusive, ignore)


def _outside_torch(obj, low, high, inclusive, ignore) -> OutOfRange:
    torch = _torch()
    with torch.no_grad():
        sampled = obj.numel() > EXACT_LIMIT
        values = _sample(obj) if sampled else obj
        values = values.detach()
        if values.device.type != "cpu":
            values = values.cpu()
        mask = torch.zeros(values.shape, dtype=torch.bool)
        nan = 0
        if values.dtype.is_floating_point:
            nan_mask = torch.isnan(values)
            nan = int(nan_mask.sum())
            mask |= nan_mask
        mask = _mark_outside(values, mask, low, high, inclusive, ignore)
        count = int(mask.sum())
        if not count:
            return OutOfRange(0, [], [], sampled, nan)
        bad = values[mask][:SHOWN]
        positions = [] if sampled else [tuple(int(i) for i in p) for p in mask.nonzero()[:SHOWN]]
        return OutOfRange(count, [_py(v) for v in bad], positions, sampled, nan)


def _mark_outside(values, mask, low, high, inclusive, ignore):
    """The bounds part of the mask; torch tensors and numpy arrays share these operators."""
    if low is not None:
        mask |= values < low
    if high is not None:
        mask |= (values > high) if inclusive else (values >= high)
    if ignore is not None:
        mask &= values != ignore
    return mask


def _outside_numpy(obj, low, high, inclusive, ignore) -> OutOfRange:
    numpy = sys.modules["numpy"]
    sampled = obj.size > EXACT_LIMIT
    values = _sample(obj) if sampled else obj
    mask = numpy.zeros(values.shape, dtype=bool)
    nan = 0
    if values.dtype.kind == "f":
        nan_mask = numpy.isnan(values)
        nan = int(nan_mask.sum())
        mask |= nan_mask
    mask = _mark_outside(values, mask, low, high, inclusive, ignore)
    count = int(mask.sum())
    if not count:
        return OutOfRange(0, [], [], sampled, nan)
    positions = [] if sampled else [tuple(int(i) for i in p) for p in numpy.argwhere(mask)[:SHOWN]]
    return OutOfRange(count, [_py(v) for v in values[mask][:SHOWN]], positions, sampled, nan)
