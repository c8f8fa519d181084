"""Out of memory: how much is held, by which names in the namespace, and how to free it.

An OOM is recoverable (the context still works), so the user needs no restart, only to know what to delete. The
figures come from three places, each used only when it is free to read: the allocator's counters, when CUDA is
already initialised in this process (never initialised here); the sizes of tensors reachable from the
namespace (metadata only, no values, no synchronisation); and the figures PyTorch puts in the error text.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from nb_cudaguard.diagnosis.tensors import is_tensor
from nb_cudaguard.incident.incident import Incident

SHOWN = 8
_OOM_TEXT = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory", re.IGNORECASE)
_SIZE = r"([\d.]+ [KMGTPE]?i?B)"
_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_FREE = re.compile(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_BY_TORCH = re.compile(_SIZE + r" is allocated by PyTorch")
_HIDDEN = frozenset({"In", "Out", "exit", "quit", "get_ipython"})


def is_out_of_memory(incident: Incident) -> bool:
    return incident.exc_type.endswith("OutOfMemoryError") or bool(_OOM_TEXT.search(incident.message))


def human(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


@dataclass
class Holder:
    """A name in the namespace and the tensor memory it keeps alive."""

    name: str
    what: str
    device: str
    nbytes: int

    def to_text(self) -> str:
        return f"{self.name}: {human(self.nbytes)} on {self.device} ({self.what})"


@dataclass
class MemoryFacts:
    allocated: int | None = None
    reserved: int | None = None
    free: int | None = None
    total: int | None = None
    counters: str = ""  # where the four numbers above come from, or why there are none
    from_message: dict[str, str] = field(default_factory=dict)
    holders: list[Holder] = field(default_factory=list)

    @property
    def cached(self) -> int | None:
        if self.reserved is None or self.allocated is None:
            return None
        return self.reserved - self.allocated

    def summary_lines(self) -> list[str]:
        lines = []
        if self.allocated is not None:
            lines.append(
                f"PyTorch holds {human(self.allocated)} in tensors and {human(self.cached)} more in its cache "
                f"({human(self.reserved)} reserved)."
            )
        if self.free is not None:
            lines.append(f"The GPU has {human(self.free)} free of {human(self.total)}.")
        if not lines:
            lines.append(f"Allocator figures: {self.counters}.")
        message = self.from_message
        if message:
            said = [f"tried to allocate {message['tried']}" if "tried" in message else ""]
            said.append(f"{message['free']} free of {message['total']}" if "free" in message else "")
            said.append(f"{message['by_torch']} allocated by PyTorch" if "by_torch" in message else "")
            lines.append("The error says: " + "; ".join(s for s in said if s) + ".")
        return lines

    def how_to_free(self) -> list[str]:
        """Steps in the order that frees the most for the least effort."""
        steps = []
        cuda = [h.name for h in self.holders if h.device.startswith("cuda") and not h.name.startswith("Out[")]
        if cuda:
            steps.append(f"del {', '.join(cuda[:4])}  # the biggest names on the GPU, if you no longer need them")
        if any(h.name.startswith("Out[") for h in self.holders):
            steps.append("%reset -f out  # IPython's output history keeps returned tensors alive")
        steps.append(
            "from nb_cudaguard.panel.memory import release; release()  # the failed cell's traceback keeps its locals"
            " alive: this drops it, collects garbage and empties PyTorch's cache"
        )
        steps.append("Then: a smaller batch, torch.no_grad() for inference, or torch.autocast for half precision.")
        return steps


def _cuda_counters(facts: MemoryFacts) -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        facts.counters = "not read (torch is not imported)"
        return
    try:
        initialised = bool(torch.cuda.is_initialized())
    except Exception as exc:
        facts.counters = f"not read ({type(exc).__name__})"
        return
    if not initialised:
        facts.counters = "not read (CUDA is not initialised in this process)"
        return
    cuda = torch.cuda
    try:
        facts.allocated = int(cuda.memory_allocated())
        facts.reserved = int(cuda.memory_reserved()) if hasattr(cuda, "memory_reserved") else None
        if hasattr(cuda, "mem_get_info"):
            facts.free, facts.total = (int(v) for v in cuda.mem_get_info())
        facts.counters = f"torch.cuda on device {cuda.current_device()}"
    except Exception as exc:  # a context in trouble: the namespace sizes below still help
        facts.counters = f"not read ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"


def _from_message(text: str) -> dict[str, str]:
    found = {}
    if match := _TRIED.search(text):
        found["tried"] = match.group(1)
    if match := _FREE.search(text):
        found["total"], found["free"] = match.group(1), match.group(2)
    if match := _BY_TORCH.search(text):
        found["by_torch"] = match.group(1)
    return found


def _storage_key(tensor) -> tuple:
    try:
        store = (getattr(tensor, "untyped_storage", None) or tensor.storage)()
        return (str(tensor.device), store.data_ptr(), int(store.nbytes()))
    except Exception:  # meta tensors, tensor subclasses without storage
        return (str(tensor.device), id(tensor), int(tensor.numel() * tensor.element_size()))


class _Sizer:
    """Bytes of distinct storages reachable from one value, counted once across the whole namespace."""

    def __init__(self) -> None:
        self.seen: set[tuple] = set()

    def tensor(self, tensor) -> tuple[int, str]:
        key = _storage_key(tensor)
        if key in self.seen or tensor.device.type == "meta":
            return 0, key[0]
        self.seen.add(key)
        return key[2], key[0]

    def value(self, value, depth: int = 0) -> tuple[int, str, str]:
        """(bytes, device, description) of a tensor, a module, an optimizer or a container of tensors."""
        if is_tensor(value):
            size, device = self.tensor(value)
            shape = "[" + ", ".join(str(s) for s in value.shape) + "]"
            return size, device, f"tensor {shape} {str(value.dtype).replace('torch.', '')}"
        tensors = list(self._tensors_in(value, depth))
        total, devices = 0, []
        for tensor in tensors:
            size, device = self.tensor(tensor)
            total += size
            devices.append(device)
        device = max(set(devices), key=devices.count) if devices else "-"
        return total, device, f"{type(value).__name__} with {len(tensors)} tensor(s)"

    def _tensors_in(self, value, depth: int):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.nn.Module):
            yield from value.parameters()
            yield from value.buffers()
            yield from (p.grad for p in value.parameters() if p.grad is not None)
        elif torch is not None and isinstance(value, torch.optim.Optimizer):
            for state in value.state.values():
                yield from (v for v in state.values() if is_tensor(v))
        elif depth < 1 and isinstance(value, list | tuple | dict):
            items = value.values() if isinstance(value, dict) else value
            for item in list(items)[:1000]:
                if is_tensor(item):
                    yield item
                elif isinstance(item, list | tuple | dict):
                    yield from self._tensors_in(item, depth + 1)


def _holders(namespace: dict, limit: int) -> list[Holder]:
    sizer = _Sizer()
    found = []
    items = [(k, v) for k, v in namespace.items() if isinstance(k, str) and not k.startswith("_") and k not in _HIDDEN]
    history = namespace.get("Out")
    if isinstance(history, dict):
        items += [(f"Out[{n}]", v) for n, v in history.items()]
    for name, value in items:
        try:
            nbytes, device, what = sizer.value(value)
        except Exception:
            continue
        if nbytes:
            found.append(Holder(name, what, device, nbytes))
    found.sort(key=lambda h: (not h.device.startswith("cuda"), -h.nbytes))
    return found[:limit]


def release(shell=None, incidents: list[Incident] | None = None) -> int | None:
    """Drop what keeps the failed cell's locals alive (its traceback, in IPython and in nb_cudaguard's incidents),
    collect garbage and hand PyTorch's cached blocks back. Returns the bytes still allocated, when CUDA is up.

    The panel passes its session's shell and incidents; the user's own ``release()`` (the step the text report
    gives) passes neither, and they are found on the running shell."""
    import gc

    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    if shell is not None:
        shell.last_execution_result = None
    if incidents is None:
        incidents = _session_incidents(shell) if shell is not None else []
    for incident in incidents:
        incident.exception = None
        for frame in incident.frames:
            frame.locals = {}
    gc.collect()
    facts = MemoryFacts()
    _cuda_counters(facts)
    if facts.allocated is not None:
        sys.modules["torch"].cuda.empty_cache()
    return facts.allocated


def _session_incidents(shell) -> list[Incident]:
    """The loaded extension's incidents, found where IPython lists the shell's configurables (the session object
    registers itself there for ``%config``): this module ranks below the package that defines it, so it cannot
    import it to ask."""
    for configurable in getattr(shell, "configurables", ()):
        incidents = getattr(configurable, "incidents", None)
        if isinstance(incidents, list) and all(isinstance(i, Incident) for i in incidents):
            return incidents
    return []


def memory_facts(incident: Incident, limit: int = SHOWN) -> MemoryFacts:
    """Read after the failure; nothing here allocates on the GPU or waits for it."""
    facts = MemoryFacts(from_message=_from_message(incident.message))
    _cuda_counters(facts)
    facts.holders = _holders(incident.namespace or {}, limit)
    return facts
