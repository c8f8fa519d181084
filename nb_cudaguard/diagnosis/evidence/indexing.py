"""Indexing ops in the failing line: ``x[i]``, ``index_select``, ``gather``/``scatter``, ``one_hot``.

Each checks the index against the size of the dimension it indexes. An index of -9223372036854775808 is the
integer a NaN becomes when cast (``.long()``), so it is reported as ``nan_or_inf`` together with the float tensor
that holds the NaN, when one is in reach.
"""

from __future__ import annotations

import math
from typing import Any

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.context import Context, nan_cast_origin, nan_cause, nan_holders, range_evidence
from nb_cudaguard.diagnosis.evidence.static import CallSite
from nb_cudaguard.diagnosis.evidence.workspace import Named
from nb_cudaguard.diagnosis.tensors import INT64_MIN, is_integral

_GATHER = ("gather", "take_along_dim")
_SCATTER = ("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_")


def analyse(ctx: Context) -> list[Cause]:
    causes = _subscripts(ctx)
    for call in ctx.line.calls:
        if call.name in _GATHER + _SCATTER:
            causes += _gather_scatter(ctx, call)
        elif call.name in ("index_select", "take"):
            causes += _index_select(ctx, call)
        elif call.name == "one_hot":
            causes += _one_hot(ctx, call)
    causes += _nan_cast(ctx)
    return causes


def _bounds_cause(ctx: Context, family: str, index: Named, size: int, source: str, what: str, fix: str) -> Cause | None:
    low = -size if family == "advanced_index_out_of_bounds" else 0
    found, read = ctx.values_outside(index, low, size)
    if found is None:
        return nan_cast_origin(ctx, index)
    if not found.count:
        return None
    valid = f"[{low}, {size})"
    evidence = [range_evidence(ctx, index, found, valid, source, what, read)]
    if INT64_MIN in found.values:
        return nan_cause(ctx, index, evidence)
    return ctx.cause(family, 0.88, index.name, fix, evidence)


def _shape(obj: object) -> Any:
    return getattr(obj, "shape", ())


def _subscripts(ctx: Context) -> list[Cause]:
    causes = []
    for sub in ctx.line.subscripts:
        base = ctx.tensor(sub.base)
        if base is None or not _shape(base.obj):
            continue
        size = int(_shape(base.obj)[0])
        source = f"{base.name}.shape[0]"
        fix = f"Indices into {base.name} along dimension 0 must lie in [-{size}, {size})."
        if sub.constant is not None:
            if -size <= sub.constant < size:
                continue
            evidence = [
                Evidence(
                    "source",
                    f"`{ctx.line.text}` reads {base.name}[{sub.constant}] but {source} = {size}",
                    variable=base.name,
                    values=[sub.constant],
                    valid_range=f"[-{size}, {size})",
                    range_source=source,
                    source_line=ctx.source_line,
                ),
                ctx.tensor_evidence(base, "the indexed tensor"),
            ]
            causes.append(ctx.cause("advanced_index_out_of_bounds", 0.9, base.name, fix, evidence))
            continue
        index = ctx.tensor(sub.index)
        if index is None or not is_integral(index.obj):
            continue
        cause = _bounds_cause(ctx, "advanced_index_out_of_bounds", index, size, source, f"indexing {base.name}", fix)
        if cause is not None:
            cause.evidence.append(ctx.tensor_evidence(base, "the indexed tensor"))
            causes.append(cause)
    return causes


def _dim_arg(ctx: Context, call: CallSite, position: int) -> int | None:
    if "dim" in call.keywords:
        value = ctx.value(call.keywords["dim"])
        if isinstance(value, int):
            return value
        try:
            return int(call.keywords["dim"])
        except ValueError:
            return None
    if len(call.int_args) > position:
        return call.int_args[position]
    return None


def _gather_scatter(ctx: Context, call: CallSite) -> list[Cause]:
    method = call.receiver is not None and call.receiver not in ("torch", "th")
    if method:
        source, dim, index = ctx.tensor(call.receiver), _dim_arg(ctx, call, 0), call.args[1:2]
    else:
        source, dim, index = ctx.tensor(call.args[0] if call.args else None), _dim_arg(ctx, call, 1), call.args[2:3]
    index_named = ctx.tensor(call.keywords.get("index") or (index[0] if index else None))
    if source is None or index_named is None or dim is None:
        return []
    size = int(_shape(source.obj)[dim])
    where = f"{source.name}.shape[{dim}]"
    fix = f"{call.name} indices along dim {dim} must lie in [0, {size}) ({where})."
    cause = _bounds_cause(ctx, "gather_scatter_index", index_named, size, where, f"{call.name} along dim {dim}", fix)
    return [cause] if cause is not None else []


def _index_select(ctx: Context, call: CallSite) -> list[Cause]:
    method = call.receiver is not None and call.receiver not in ("torch", "th")
    source = ctx.tensor(call.receiver if method else (call.args[0] if call.args else None))
    if source is None:
        return []
    if call.name == "take":
        index = ctx.tensor(call.args[0] if method else (call.args[1] if len(call.args) > 1 else None))
        size, where = math.prod(int(n) for n in _shape(source.obj)), f"{source.name}.numel()"
    else:
        dim = _dim_arg(ctx, call, 0 if method else 1)
        index = ctx.tensor(
            call.args[1] if method and len(call.args) > 1 else (call.args[2] if len(call.args) > 2 else None)
        )
        if dim is None:
            return []
        size, where = int(_shape(source.obj)[dim]), f"{source.name}.shape[{dim}]"
    if index is None:
        return []
    fix = f"Indices must lie in [0, {size}) ({where})."
    cause = _bounds_cause(ctx, "advanced_index_out_of_bounds", index, size, where, call.name, fix)
    return [cause] if cause is not None else []


def _one_hot(ctx: Context, call: CallSite) -> list[Cause]:
    labels = ctx.tensor(call.keywords.get("tensor") or (call.args[0] if call.args else None))
    classes_expr = call.keywords.get("num_classes") or (call.args[1] if len(call.args) > 1 else None)
    if labels is None or classes_expr is None:
        return []
    classes = ctx.value(classes_expr)
    if not isinstance(classes, int):
        try:
            classes = int(classes_expr)
        except ValueError:
            return []
    found, read = ctx.values_outside(labels, 0, classes)
    if found is None:
        evidence = [ctx.tensor_evidence(labels, f"one_hot(..., num_classes={classes}) input", direct=False)]
        fix = f"one_hot(..., num_classes={classes}) needs every value of {labels.name} in [0, {classes})."
        return [ctx.cause("one_hot_num_classes", 0.5, labels.name, fix, evidence)]
    if not found.count:
        return []
    valid = f"[0, {classes})"
    evidence = [range_evidence(ctx, labels, found, valid, f"num_classes={classes_expr}", "one_hot classes", read)]
    biggest = max((v for v in found.values if isinstance(v, int)), default=None)
    fix = (
        f"one_hot(..., num_classes={classes}) needs values in {valid}: pass num_classes={biggest + 1}, "
        "or map the out-of-range labels first."
        if isinstance(biggest, int) and biggest >= classes
        else f"one_hot needs non-negative values below {classes}: map the negative labels first."
    )
    return [ctx.cause("one_hot_num_classes", 0.9, labels.name, fix, evidence)]


def _nan_cast(ctx: Context) -> list[Cause]:
    """``int(x)`` or ``.long()`` of a NaN in the failing line, caught by Python before any kernel ran."""
    if "cannot convert float NaN to integer" not in ctx.incident.message:
        return []
    if not nan_holders(ctx):
        return []
    return [nan_cause(ctx, None, [])]
