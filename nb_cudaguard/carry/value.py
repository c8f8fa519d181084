"""Can a value cross the restart as it is, and what does that cost? One pickle answers both questions.

A poisoned CUDA context makes every CUDA object unreadable, but what lives on the CPU is intact: a DataFrame that
took minutes to load need not be loaded again. A value is carried only when everything its pickle reaches is a
plain CPU object. The pickler itself is the walk: ``reducer_override`` sees every object that is not a built-in
scalar or container, before it is written, so a CUDA tensor is refused before its storage is touched (touching it
would raise in a poisoned context), and the first look at a generator, an open file, a socket, a thread or a
module stops the pickle.

Pickles can run code: ``__reduce__`` when the value is written, the reconstructor and ``__setstate__`` when it is
read back. A class outside the trusted libraries (numpy, torch, pandas, the standard containers) that brings its
own pickling code (in the class, or a function registered for it with ``copyreg``), or a reduction whose
reconstructor is not a plain constructor, is refused: that value is rebuilt
by replaying its cell instead, which is what would have happened anyway. Classes, functions, and the callables a
trusted library keeps under their own name (numpy's Cython reconstructors) are saved by reference, so their own
pickling code is never asked.

Each value is pickled on its own (protocol 5); ``identity`` keeps names that share objects from being carried.
The raw memory of arrays (numpy's and pandas' column data) leaves the pickle as protocol 5 out-of-band buffers,
written once into a second file at aligned offsets. The new process maps that file copy-on-write and hands the
buffers to the unpickler, so a 2 GB DataFrame is neither read into a bytes object nor copied by unpickling: the
arrays are backed by the mapped pages, writable, at the memory cost of one copy. Both files are bound by SHA-256.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import os
import pickle
import socket
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from nb_cudaguard.errors import NbCudaguardError

# Reconstructors and classes from these packages are trusted to rebuild a value without other effects.
_TRUSTED_MODULES = (
    "numpy",
    "torch",
    "pandas",
    "collections",
    "copyreg",
    "datetime",
    "decimal",
    "fractions",
    "pathlib",
    "re",
    "enum",
    "uuid",
    "array",
    "zoneinfo",
    "ipaddress",
    "types",
    "functools",
    "builtins",
)
_SAFE_CALLABLES = frozenset({getattr})
# A chunk of the pickle this large (an array's buffer, protocol 5) is hashed on a thread while it is written.
_HASH_BESIDE_BYTES = 1 << 20
# Out-of-band buffers start at multiples of this in their file, so that mapped arrays are aligned for SIMD loads.
_BUFFER_ALIGN = 64
_CUSTOM_HOOKS = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")


class NotCarriable(NbCudaguardError):
    """Why a value must be rebuilt by replay rather than carried."""


@dataclass
class Measure:
    """The pickle of one name: its size and time, or why it cannot be carried. ``file`` and ``sha256`` are set when
    the pickle went into a file, and ``seconds`` then includes the hash and the write. ``buffers`` is the file of its
    out-of-band buffers (``mapped_bytes`` of them), where ``spans`` are their (offset, length)."""

    name: str
    bytes: int = 0
    seconds: float = 0.0
    reason: str | None = None
    sha256: str | None = None
    file: str | None = None
    mapped_bytes: int = 0
    buffers: str | None = None
    buffers_sha256: str | None = None
    spans: list[tuple[int, int]] = field(default_factory=list)

    @property
    def carriable(self) -> bool:
        return self.reason is None


def _module_of(obj) -> str:
    return str(getattr(obj, "__module__", None) or "")


def _trusted(module: str) -> bool:
    return module.split(".")[0] in _TRUSTED_MODULES


def _own_pickling_code(cls: type) -> str | None:
    """The first pickling hook that ``cls`` defines outside the trusted libraries, as ``module.Class.hook``."""
    for klass in cls.__mro__:
        if klass is object or _trusted(_module_of(klass)):
            continue
        for hook in _CUSTOM_HOOKS:
            if hook in vars(klass):
                return f"{_module_of(klass)}.{klass.__qualname__}.{hook}"
    return None


def _refusal(obj) -> str | None:
    """What makes ``obj`` something that cannot leave this process, or None."""
    module = type(obj).__module__ or ""
    if module.startswith("torch"):
        device = _torch_device(obj)
        if device is not None and device != "cpu":
            return f"holds a tensor or storage on the {device} device"
        if type(obj).__name__ in ("Stream", "Event", "ExternalStream") or module.startswith("torch.cuda"):
            return f"holds a {module}.{type(obj).__name__}"
    if isinstance(obj, io.IOBase):
        return "holds an open file"
    if isinstance(obj, socket.socket):
        return "holds a socket"
    if isinstance(obj, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return "holds a generator"
    if isinstance(obj, threading.Thread):
        return "holds a thread"
    if isinstance(obj, types.ModuleType):
        return f"is or holds the module {obj.__name__} (modules are imported again, not carried)"
    if isinstance(obj, (type, types.FunctionType)) and _module_of(obj) == "__main__":
        return f"refers to {obj.__qualname__}, defined in the notebook (its cell is replayed instead)"
    return None


def _torch_device(obj) -> str | None:
    """The device type of a tensor or storage, read without touching its memory (no sync, no CUDA call)."""
    torch = sys.modules.get("torch")
    if torch is None:  # the caller saw a class from torch, so it is imported
        return None
    untyped = getattr(torch, "UntypedStorage", None)
    if isinstance(obj, torch.Tensor) or (untyped is not None and isinstance(obj, untyped)):
        return obj.device.type
    typed = getattr(getattr(torch, "storage", None), "TypedStorage", ())
    if isinstance(obj, typed):
        return obj._untyped_storage.device.type
    return None


class _HashedFile:
    """A new private file (0600, created exclusively) and the SHA-256 of everything written into it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.handle = os.fdopen(fd, "wb", buffering=1024 * 1024)
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data) -> None:
        size = memoryview(data).nbytes
        if size >= _HASH_BESIDE_BYTES:
            hashing = threading.Thread(target=self.hash.update, args=(data,), name="nb_cudaguard-hash")
            hashing.start()  # hashing and writing both release the GIL: a large buffer costs the slower of the two
            try:
                self.handle.write(data)
            finally:
                hashing.join()
        else:
            self.hash.update(data)
            self.handle.write(data)
        self.size += size

    def close(self) -> None:
        if not self.handle.closed:
            self.handle.close()


class _Budget:
    """A sink that counts and stops the pickle once a limit is passed. With a path, it also writes: the pickle
    stream into it, out-of-band buffers into its ``.buf`` sibling, as long as the whole fits in ``file_bytes``
    (past that it lets the files go and only counts on)."""

    def __init__(self, path: Path | None, max_bytes: int, deadline: float, max_seconds: float, file_bytes: int):
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.max_seconds = max_seconds
        self.file_bytes = file_bytes
        self.count = 0
        self.mapped = 0
        self.spans: list[tuple[int, int]] = []
        # the files being written; both None when there is no path or once the pickle outgrew ``file_bytes``
        self.stream = _HashedFile(path) if path is not None else None
        self.buffers: _HashedFile | None = None

    def check_time(self) -> None:
        if time.perf_counter() > self.deadline:
            raise NotCarriable(f"its pickle took longer than {self.max_seconds:g} s (CudaGuard.carry_max_seconds)")

    def _add(self, size: int) -> None:
        self.count += size
        if self.count > self.max_bytes:
            raise NotCarriable(
                f"its pickle passed the size budget of {self.max_bytes} bytes (CudaGuard.carry_max_bytes)"
            )
        self.check_time()
        if self.stream is not None and self.count > self.file_bytes:
            self.close()
            self.stream = self.buffers = None

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        self._add(size)
        if self.stream is not None:
            self.stream.write(data)
        return size

    def buffer(self, pickled: pickle.PickleBuffer) -> bool:
        """The pickler's ``buffer_callback``: False keeps the buffer out of the stream (it goes to the ``.buf`` file);
        True (memory that is not contiguous) has it written into the stream as bytes."""
        try:
            raw = pickled.raw()
        except BufferError:
            return True
        self._add(raw.nbytes)
        self.mapped += raw.nbytes
        if self.stream is not None:
            if self.buffers is None:
                self.buffers = _HashedFile(_buffers_path(self.stream.path))
            padding = -self.buffers.size % _BUFFER_ALIGN
            if padding:
                self.buffers.write(bytes(padding))
            self.spans.append((self.buffers.size, raw.nbytes))
            self.buffers.write(raw)
        return False

    def close(self) -> None:
        for written in (self.stream, self.buffers):
            if written is not None:
                written.close()


class _CarryPickler(pickle.Pickler):
    def __init__(self, sink: _Budget) -> None:
        super().__init__(sink, protocol=5, buffer_callback=sink.buffer)
        self.sink = sink

    def reducer_override(self, obj):
        self.sink.check_time()
        why = _refusal(obj)
        if why is not None:
            raise NotCarriable(why)
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            return NotImplemented  # pickled by reference
        name = _trusted_global(obj)
        if name is not None:
            return name  # saved as that global: nothing of it runs now, and loading it only looks the name up
        cls = type(obj)
        hook = _own_pickling_code(cls)
        if hook is not None:
            raise NotCarriable(f"its class has its own pickling code ({hook}), which may have side effects")
        reducer = getattr(self, "dispatch_table", copyreg.dispatch_table).get(cls)
        if reducer is not None and not _trusted(_module_of(reducer)):
            where = f"{_module_of(reducer)}.{getattr(reducer, '__qualname__', reducer)}"
            raise NotCarriable(
                f"its class has a pickling function registered with copyreg ({where}), which may have side effects"
            )
        reduced = reducer(obj) if reducer is not None else obj.__reduce_ex__(5)
        if isinstance(reduced, str):
            return NotImplemented  # a global, such as a singleton
        rebuild = reduced[0]
        if not (rebuild in _SAFE_CALLABLES or (_trusted(_module_of(rebuild)) and _rebuilds_plainly(rebuild))):
            where = f"{_module_of(rebuild)}.{getattr(rebuild, '__qualname__', rebuild)}"
            raise NotCarriable(f"loading it would call {where}, which may have side effects")
        return reduced


def _trusted_global(obj) -> str | None:
    """The qualified name of a callable that a trusted library's module holds under that name, such as numpy's
    Cython reconstructors (``cython_function_or_method`` is neither a Python nor a builtin function). Pickled by
    that name, it is a reference, not a value: its class's own pickling code is never asked. The names are read
    through the C descriptors of its type only, so that no attribute code of an arbitrary object runs."""
    if not callable(obj):
        return None
    module, qualname = _c_attribute(obj, "__module__"), _c_attribute(obj, "__qualname__")
    if not (isinstance(module, str) and isinstance(qualname, str) and _trusted(module)):
        return None
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return qualname if found is obj else None


def _c_attribute(obj, name: str):
    for klass in type(obj).__mro__:
        descriptor = vars(klass).get(name)
        if descriptor is not None:
            if isinstance(descriptor, (types.GetSetDescriptorType, types.MemberDescriptorType)):
                return descriptor.__get__(obj, type(obj))
            return None
    return None


def _rebuilds_plainly(rebuild) -> bool:
    """Builtins are trusted only as types (``dict``, ``set``): ``eval``, ``exec``, ``open`` are builtins too."""
    return _module_of(rebuild) != "builtins" or isinstance(rebuild, type)


def measure(
    name: str, value, max_bytes: int, max_seconds: float, path: Path | None = None, file_bytes: int | None = None
) -> Measure:
    """Pickle ``value`` within the budgets, to nowhere or into ``path`` and its ``.buf`` sibling (mode 0600, created
    exclusively) with their SHA-256: one pass gives both the cost the plan weighs and the files the restart carries.
    A pickle larger than ``file_bytes`` (the disk budget other values left) is measured on without files. Never
    raises for the value's sake; a pickle that fails half-way (refused object, budget passed, unpicklable object,
    disk full) leaves no file."""
    from nb_cudaguard.incident.probe import internal_use

    result = Measure(name)
    started = time.perf_counter()
    sink = None
    try:
        limit = max_bytes if file_bytes is None else file_bytes
        sink = _Budget(path, max_bytes, started + max_seconds, max_seconds, limit)
        pickler = _CarryPickler(sink)
        with internal_use():  # our own read of CPU values, as a diagnosis does (the fault injection lets it pass)
            pickler.dump(value)
        sink.close()
        if sink.stream is not None:
            result.file, result.sha256 = sink.stream.path.name, sink.stream.hash.hexdigest()
            if sink.buffers is not None:
                result.buffers, result.buffers_sha256 = sink.buffers.path.name, sink.buffers.hash.hexdigest()
                result.spans = sink.spans
        result.bytes, result.mapped_bytes = sink.count, sink.mapped
        result.seconds = time.perf_counter() - started
    except NotCarriable as exc:
        result.reason = str(exc)
    except OSError as exc:
        result.reason = f"could not be written ({exc.strerror or exc})"
    except Exception as exc:  # an unpicklable object half-way: say which
        result.reason = f"could not be pickled ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        if sink is not None:
            try:
                sink.close()
            except OSError:
                pass
        if path is not None and result.file is None:
            path.unlink(missing_ok=True)
            _buffers_path(path).unlink(missing_ok=True)
    return result


def _buffers_path(path: Path) -> Path:
    """Where the out-of-band buffers of the pickle in ``path`` go."""
    return path.with_suffix(".buf")


def loads(stream: bytes, mapped: memoryview | None, spans: list[tuple[int, int]]):
    """The value again, its arrays backed by the mapped buffers (the views keep the mapping alive as long as any
    array uses it)."""
    buffers = [mapped[offset : offset + length] for offset, length in spans] if mapped is not None else []
    return pickle.loads(stream, buffers=buffers)
