"""Fast checks of the indexing entry points: gather/scatter and the index_* family along a dim, ``take``/``put``,
advanced indexing (``x[i]``, ``x[i] = v``, ``index_put``), ``masked_scatter`` and ``max_unpool``.

Each takes ``(label, args, kwargs)`` as the entry point received them and returns them with the checked argument
replaced by its safe form. The ranges and their wrap-around rules are the exact mode's (``ops_index``).
"""

from __future__ import annotations

import math

import torch

from nb_cudaguard.check.fast.args import Args, arg, site_of, with_arg
from nb_cudaguard.check.fast.casts import CASTS, check_cast
from nb_cudaguard.check.fast.known import KNOWN
from nb_cudaguard.check.fast.readable import VALID, again, in_range
from nb_cudaguard.check.fast.rules import compiling, eager_index, index_in_range, integral, plain, selection_fits
from nb_cudaguard.check.fast.sites import SITES, compiled_site
from nb_cudaguard.check.ops_embedding import embedding_refine
from nb_cudaguard.check.ops_index import one_hot_labels


def checked_index(
    label: str,
    argument: str,
    family: str,
    index,
    low: int,
    high: int,
    source: str,
    fix: str | None = None,
    *,
    ignore: int | None = None,
    table=None,
    eager: bool = False,
):
    """The one path of every index argument (``ignore``: a loss's ignore_index, kept).

    Traced into the graph under ``torch.compile``. In eager mode: nothing for the tensor read valid against this
    range before, unchanged (``fast.readable.again``); an index whose values the host reads without a
    synchronisation, found valid, is returned as it is (``fast.readable.in_range``); otherwise NaN/inf provenance
    first (so it is reported first), then the range, on the deferred path, where the same unchanged index is not
    checked again against the same range (``fast.known``). ``eager``: the caller has asked whether Dynamo is tracing
    and ``again`` itself (the embedding and loss checks, before their argument tests), and ``index`` may then be
    meta or empty (``integer_typed``). Each is asked once: a new batch's check runs cold (the step's own work has
    evicted the caches), so every call on its path costs a few µs (docs/performance.md).
    ``table``: an embedding's weight, whose owner refines the family at the site's first call."""
    if not eager:
        if compiling():
            if not plain(index):
                return index
            return index_in_range(compiled_site(label, argument, family, source, fix), index, low, high, ignore)
        if VALID and again(index, low, high, ignore):
            return index
    if in_range(index, low, high, ignore):
        return index
    if index.is_meta or not index.numel():
        return index
    if KNOWN._owners:
        known = KNOWN.safe(index, low, high, ignore)
        if known is not None:
            return known
    if CASTS._by_id:
        check_cast(label, argument, index)
    refine = embedding_refine(table) if table is not None else None
    valid = (low, high) if ignore is None else (low, high, ignore)
    site = SITES.here((label, argument, family, valid, source), index, refine, fix)
    return eager_index(site, index, low, high, ignore)


def _size(t, dim: int) -> int:
    return t.size(dim) if t.dim() > 0 else 1


def along_dim(family: str, negative_ok: bool):
    """gather, scatter*, index_select, index_add/copy/reduce (``[0, size)``), index_fill (``[-size, size)``)."""

    def check(label: str, args: tuple, kwargs: dict) -> Args:
        t, dim, index = args[0], arg(args, kwargs, 1, "dim"), arg(args, kwargs, 2, "index")
        if type(dim) is not int or not integral(index) or not plain(t) or t.is_sparse:
            return args, kwargs
        size = _size(t, dim)
        low = -size if negative_ok else 0
        labels = _one_hot_form(label, t, dim, index, args, kwargs)
        if labels is not None:
            classes = t.size(-1)
            source = f"num_classes = {classes}"
            check_cast("F.one_hot", "input", labels)
            site = site_of("F.one_hot", "input", "one_hot_num_classes", labels, (0, classes), source)
            safe = index_in_range(site, labels, 0, classes).reshape(index.shape)
        else:
            safe = checked_index(label, "index", family, index, low, size, f"self.shape[{dim}]")
        return with_arg(args, kwargs, 2, "index", safe)

    return check


def _one_hot_form(label: str, t, dim: int, index, args: tuple, kwargs: dict):
    """``F.one_hot`` as CUDA runs it (``zeros(...).scatter_(-1, labels.unsqueeze(-1), 1)``): name the labels."""
    if "scatter" not in label or torch.compiler.is_compiling():
        return None
    value = arg(args, kwargs, 3, "value")
    if value is None or isinstance(value, torch.Tensor):
        return None
    return one_hot_labels(t, dim, index, value)


def flat_index(label: str, args: tuple, kwargs: dict) -> Args:
    """take / put / put_: an index into the flattened tensor, ``[-numel, numel)``."""
    t, index = args[0], arg(args, kwargs, 1, "index")
    if not plain(t) or not integral(index):
        return args, kwargs
    n = t.numel()
    return with_arg(args, kwargs, 1, "index", checked_index(label, "index", _FAMILY, index, -n, n, "self.numel()"))


_FAMILY = "advanced_index_out_of_bounds"


def _key_items(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def _consumes(item) -> int:
    """How many of the tensor's dims one item of an indexing key uses up."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, torch.Tensor) and item.dtype in (torch.bool, torch.uint8):
        return max(item.dim(), 1)
    return 1


def _safe_key(label: str, t, items) -> tuple | None:
    """The key with each integer index tensor made safe for the dim it indexes; None when it has none."""
    if not any(isinstance(item, torch.Tensor) and integral(item) for item in items):
        return None
    used = sum(_consumes(item) for item in items)
    dim, safe = 0, []
    for position, item in enumerate(items):
        if item is Ellipsis:
            dim += max(t.dim() - used, 0)
        elif isinstance(item, torch.Tensor) and integral(item) and dim < max(t.dim(), 1):
            size = _size(t, dim)
            item = checked_index(label, f"indices[{position}]", _FAMILY, item, -size, size, f"self.shape[{dim}]")
        dim += _consumes(item)
        safe.append(item)
    return tuple(safe)


def getitem(label: str, args: tuple, kwargs: dict) -> Args:
    """``x[key]`` and ``x[key] = value``: basic keys (ints, slices, or a tuple of them: ``x[:, -1]``) cost a type
    test per item and nothing else (the tuple's was 5 µs before it had this way out, measured warm)."""
    t, key = args[0], args[1]
    kind = type(key)
    if kind is int or kind is slice or key is None:
        return args, kwargs
    if kind is tuple:
        for item in key:
            if isinstance(item, torch.Tensor):
                break
        else:
            return args, kwargs
    if not plain(t):
        return args, kwargs
    items = _key_items(key)
    safe = _safe_key(label, t, items)
    if safe is None:
        return args, kwargs
    return (t, safe if isinstance(key, tuple) else safe[0], *args[2:]), kwargs


def index_put(label: str, args: tuple, kwargs: dict) -> Args:
    """index_put(_)(indices, values): one optional index tensor per leading dim."""
    t, indices = args[0], arg(args, kwargs, 1, "indices")
    if not plain(t) or not isinstance(indices, (tuple, list)):
        return args, kwargs
    safe = _safe_key(label, t, tuple(indices))
    if safe is None:
        return args, kwargs
    return with_arg(args, kwargs, 1, "indices", safe)


def masked_scatter(label: str, args: tuple, kwargs: dict) -> Args:
    t, mask, source = args[0], arg(args, kwargs, 1, "mask"), arg(args, kwargs, 2, "source")
    if not plain(t) or not plain(mask) or not isinstance(source, torch.Tensor):
        return args, kwargs
    shape = torch.broadcast_shapes(t.shape, mask.shape)
    available = source.numel()
    site = site_of(
        label,
        "mask",
        "other",
        mask,
        f"at most {available} True elements",
        "source.numel()",
        "masked_scatter needs source.numel() >= mask.sum(): check the mask and the source's size.",
    )
    return with_arg(args, kwargs, 1, "mask", selection_fits(site, mask, shape, available))


def max_unpool(label: str, args: tuple, kwargs: dict) -> Args:
    """torch._C._nn.max_unpool2d/3d(input, indices, output_size, ...): what F.max_unpool1d/2d/3d call."""
    indices, output_size = arg(args, kwargs, 1, "indices"), arg(args, kwargs, 2, "output_size")
    if not integral(indices) or output_size is None:
        return args, kwargs
    sizes = tuple(int(s) for s in output_size)
    fix = "Pass the indices returned by the matching max_pool call (return_indices=True) and its input's size."
    safe = checked_index(label, "indices", _FAMILY, indices, 0, math.prod(sizes), f"output_size {sizes}", fix)
    return with_arg(args, kwargs, 1, "indices", safe)
