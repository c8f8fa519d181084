"""Where each device tensor's values came from, as the runtime saw the copy: the host tensor ``.to(device)`` or
``.cuda()`` read.

After a device-side assert nothing on the GPU can be read, and the host batch a loop moved there
(``xb, yb = xb.to(device), yb.to(device)``) is usually gone: its name now holds the device copy, and the loader
made it for that one step. Guessed from the source, ``yb`` "came from" a dataset, but which one, and which rows,
only the copy itself knows. So the two methods that copy to a device are wrapped: each copy from the host to a
device is remembered, keyed by the device tensor, for as long as that device tensor lives. Whatever built the host
tensor (``torch.cat`` of two sources, a permutation, indexing, stacking, a ``DataLoader`` over a ``TensorDataset``)
is behind it: the values read are the very ones the device received. The same ops made on the device after the
copies (``torch.cat([a.to(device), b.to(device)])``, ``torch.stack``, ``labels[perm]``) are followed too: where
every device input of one has a known host source, the op is made again on those sources, on the host, and its
result is the device result's source. Only index-like results are followed (labels, ids: small, and what an
assertion reads); an index on the device with no known source (``torch.randperm(n, device=...)``) ends the trail.

The host source is held (a reference, no copy, no value read) only where an assertion can come from its values and
the cost stays small: integer and bool tensors (labels, token ids, indices) of at most ``HELD_LIMIT`` elements,
within ``HELD_BYTES`` in all. Any other source is held weakly: readable while the user's own name keeps it alive.
The wrapper reads metadata only (device types, dtype, size) and stays out of the way of ``torch.compile``.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
import traceback
import types
import weakref
from dataclasses import dataclass
from typing import Any

HELD_LIMIT = 1 << 20  # elements of one host source held alive (a batch of labels or token ids is far smaller)
HELD_BYTES = 256 << 20  # host memory held in all; past it, sources are held weakly
_WRAPPED = ("to", "cuda")
_FOLLOWED = ("cat", "stack")  # torch's functions whose device result is made again from the inputs' host sources


@dataclass
class Copy:
    """One host-to-device copy: the device tensor (weakly) and the host tensor it was copied from."""

    device: weakref.ref
    source: Any  # the host tensor itself, or a weak reference to it
    held: int  # bytes held alive by this entry (0 when the source is held weakly)
    versions: tuple[int, int, int, int]  # both version counters and data pointers at the copy: a write in place
    # since bumps a counter, ``t.data = other`` changes a pointer
    owned: bool  # the host memory is PyTorch's own: memory shared with NumPy can change with no version bump

    def host(self) -> Any:
        """The host tensor, while both still hold the values of the copy (neither was written in place, nor had its
        ``.data`` swapped, since)."""
        source = self.source
        host = source() if isinstance(source, weakref.ref) else source
        device = self.device()
        if host is None or device is None:
            return None
        if (device._version, host._version, device.data_ptr(), host.data_ptr()) != self.versions:
            return None
        return host


class Copies:
    """The live host-to-device copies, by the device tensor's id; an entry goes when its device tensor does."""

    def __init__(self) -> None:
        self._by_id: dict[int, Copy] = {}
        self.held = 0
        self._originals: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    # --- what the diagnosis asks
    def source_of(self, tensor: Any, owned: bool = False) -> Any:
        """The host tensor ``tensor`` was copied from, if that copy was seen, the host tensor is still alive and
        neither was written in place or given other memory since (their version counters and data pointers say
        so). A view of a copied tensor (``yb[:8]``, ``yb.view(-1)``) is the same view of its source. ``owned``: only
        a source in memory PyTorch owns, whose values are then exactly the device tensor's (the fast checks read
        them instead of the device's)."""
        found = self._source(tensor, owned)
        if found is not None:
            return found
        base = getattr(tensor, "_base", None)
        if base is None:
            return None
        source = self._source(base, owned)
        if source is None or not _same_layout(base, source):
            return None
        try:
            offset = tensor.storage_offset() - base.storage_offset()
            return source.as_strided(tuple(tensor.shape), tuple(tensor.stride()), source.storage_offset() + offset)
        except RuntimeError:
            return None

    def _source(self, tensor: Any, owned: bool) -> Any:
        entry = self._by_id.get(id(tensor))
        if entry is None or entry.device() is not tensor or (owned and not entry.owned):
            return None
        return entry.host()

    # --- recording
    def record(self, source: Any, result: Any) -> None:
        if result is source or result.device.type == "cpu" or source.device.type != "cpu":
            return
        key = id(result)
        self._forget(key)
        size = source.numel() * source.element_size()
        keep = _is_index_like(source) and source.numel() <= HELD_LIMIT and self.held + size <= HELD_BYTES
        try:
            ref = weakref.ref(result, functools.partial(self._gone, key))
            held = source if keep else weakref.ref(source)
        except TypeError:
            return
        versions = (result._version, source._version, result.data_ptr(), source.data_ptr())
        owned = _is_index_like(source) and owned_by_torch(source)  # asked once, here: 1 µs warm
        self._by_id[key] = Copy(ref, held, size if keep else 0, versions, owned)
        self.held += size if keep else 0

    def follow(self, result: Any, again: Any, inputs: list[Any]) -> None:
        """``result`` was made on a device from ``inputs``: where each device input has a known host source, ``again``
        (the same op, given the host tensor for each input) makes its host source. Index-like results only, of at
        most ``HELD_LIMIT`` elements; nothing is read from the device."""
        if not self._by_id or result.device.type == "cpu" or not _is_index_like(result) or result.numel() > HELD_LIMIT:
            return
        hosts = {}
        for tensor in inputs:
            if tensor.device.type != "cpu":
                source = self.source_of(tensor)
                if source is None:
                    return
                hosts[id(tensor)] = source
        if hosts:
            self.record(again(lambda t: hosts.get(id(t), t)), result)

    def _gone(self, key: int, _ref: weakref.ref) -> None:
        self._forget(key)

    def _forget(self, key: int) -> None:
        entry = self._by_id.pop(key, None)
        if entry is not None:
            self.held -= entry.held

    # --- the wrappers
    def install(self) -> None:
        """Wrap ``Tensor.to`` and ``Tensor.cuda`` now if torch is imported, else as soon as it is (a notebook's first
        cell imports torch and moves its data in one go); idempotent."""
        torch = sys.modules.get("torch")
        if torch is None:
            if not any(isinstance(f, _WhenImported) for f in sys.meta_path):
                sys.meta_path.insert(0, _WhenImported(self))
            return
        if self._originals or not hasattr(torch, "Tensor"):  # wrapped, or torch is half-imported
            return
        for name in _WRAPPED:
            original = getattr(torch.Tensor, name)
            self._originals[name] = original
            setattr(torch.Tensor, name, _wrap(self, original, torch))
        for name in _FOLLOWED:
            original = getattr(torch, name)
            self._originals[f"torch.{name}"] = original
            setattr(torch, name, _followed(self, original, torch))
        self._originals["__getitem__"] = torch.Tensor.__getitem__
        torch.Tensor.__getitem__ = _indexed(self, torch.Tensor.__getitem__, torch)

    def uninstall(self) -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WhenImported)]
        torch = sys.modules.get("torch")
        for name, original in self._originals.items():
            if torch is not None:
                owner, _, attribute = name.rpartition(".")
                setattr(torch if owner else torch.Tensor, attribute, original)
        self._originals.clear()
        self._by_id.clear()
        self.held = 0


class _WhenImported(importlib.abc.MetaPathFinder):
    """Wraps the copies once torch's own import has finished: it finds torch's spec as the other finders would,
    and runs ``install`` after the module's code."""

    def __init__(self, copies: Copies) -> None:
        self.copies = copies

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            self.copies.install()

        spec.loader = _Loader(loader, exec_module)
        return spec


class _Loader(importlib.abc.Loader):
    """torch's own loader, with ``install`` after its module's code."""

    def __init__(self, loader: Any, exec_module: Any) -> None:
        self._loader = loader
        self.exec_module = exec_module  # type: ignore[method-assign]

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _wrap(copies: Copies, original: Any, torch: Any) -> Any:
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def copy_seen(self, *args, **kwargs):
        __tracebackhide__ = True
        try:
            result = original(self, *args, **kwargs)
        except BaseException as error:
            _hidden(error)
            raise
        if isinstance(result, torch.Tensor) and not compiling():
            try:
                copies.record(self, result)
            except Exception:  # a tensor subclass without a device: the copy is not worth the user's step
                pass
        return result

    copy_seen.__name__ = original.__name__
    copy_seen.__qualname__ = getattr(original, "__qualname__", original.__name__)
    copy_seen.__doc__ = original.__doc__
    copy_seen.__wrapped__ = original  # type: ignore[attr-defined]
    return copy_seen


def _followed(copies: Copies, original: Any, torch: Any) -> Any:
    """``torch.cat`` / ``torch.stack`` of device tensors, their result's host source made again from theirs."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    @functools.wraps(original)
    def followed(tensors, *args, **kwargs):
        __tracebackhide__ = True
        try:
            result = original(tensors, *args, **kwargs)
        except BaseException as error:
            _hidden(error)
            raise
        if copies._by_id and isinstance(result, torch.Tensor) and _followable(result) and not compiling():
            try:
                inputs = list(tensors)
                copies.follow(result, lambda host: original([host(t) for t in inputs], *args, **kwargs), inputs)
            except Exception:  # following the values is a courtesy: the user's op has its result
                pass
        return result

    return followed


def _indexed(copies: Copies, original: Any, torch: Any) -> Any:
    """``x[index]`` of a device tensor, its result's host source ``source[index]`` where the index's device tensors
    have host sources too (an index on the host, a slice, an int need none)."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def indexed(self, index):
        __tracebackhide__ = True
        try:
            result = original(self, index)
        except BaseException as error:
            _hidden(error)
            raise
        if copies._by_id and isinstance(result, torch.Tensor) and _followable(result) and not compiling():
            try:
                parts = index if isinstance(index, tuple) else (index,)
                inputs = [self, *(p for p in parts if isinstance(p, torch.Tensor))]

                def again(host):
                    made = tuple(host(p) if isinstance(p, torch.Tensor) else p for p in parts)
                    return original(host(self), made if isinstance(index, tuple) else made[0])

                copies.follow(result, again, inputs)
            except Exception:  # as above
                pass
        return result

    indexed.__name__ = indexed.__qualname__ = "__getitem__"
    indexed.__wrapped__ = original  # type: ignore[attr-defined]
    return indexed


def _hidden(error: BaseException) -> None:
    """Show ``error`` as torch raised it, without this wrapper's frame: IPython hides a ``__tracebackhide__`` frame
    except the last one, and here it is the last (``.to`` is C code). An error with a display of its own keeps it."""
    if not hasattr(error, "__dict__") or hasattr(error, "_render_traceback_"):
        return
    vars(error)["_render_traceback_"] = lambda: _render(error)


def _render(error: BaseException) -> list[str]:
    entries = []
    tb = error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    while entries and "__tracebackhide__" in entries[-1].tb_frame.f_locals:
        entries.pop()
    chain: types.TracebackType | None = None
    for entry in reversed(entries):
        chain = types.TracebackType(chain, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    formatter = getattr(shell, "InteractiveTB", None)
    if formatter is not None:
        lines: list[str] = formatter.structured_traceback(type(error), error, chain)
        return lines
    return traceback.format_exception(type(error), error, chain)


def owned_by_torch(host: Any) -> bool:
    """Whether PyTorch allocated ``host``'s memory (a storage it can resize): memory shared with NumPy is not, and
    can change without a version bump. torch < 2.0 has no ``untyped_storage``: there nothing is trusted as owned.
    The one place this is asked (``record.copies``, ``check.fast.readable``, ``check.fast.known``)."""
    storage = getattr(host, "untyped_storage", None)
    return storage is not None and bool(storage().resizable())


def _followable(result: Any) -> bool:
    """A device result whose source is worth making again: index-like (an activation, the common case, is let go
    after these two attribute reads)."""
    return not result.is_cpu and _is_index_like(result)


def _is_index_like(tensor: Any) -> bool:
    dtype = tensor.dtype
    return not dtype.is_floating_point and not dtype.is_complex


def _same_layout(base: Any, source: Any) -> bool:
    return tuple(base.shape) == tuple(source.shape) and tuple(base.stride()) == tuple(source.stride())


COPIES = Copies()  # one per process: the wrapped methods are the process's
