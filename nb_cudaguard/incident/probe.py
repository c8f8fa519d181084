"""Is the CUDA context poisoned? Asked only after a cell failed, and never at the cost of creating a context.

A sticky CUDA error (device-side assert, illegal address, ...) makes every later CUDA call in the process fail
with the same error; out-of-memory does not. So after a failure we try one tiny launch and a copy back: if that
fails with a sticky error, the context is poisoned and only a new process can use the GPU again.

The check is behind a small interface so that ``nb_cudaguard.testing`` can stand in for the GPU on machines
without one (see that module); nothing else in the package knows which probe is active.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Protocol

from nb_cudaguard.incident import catalog


@dataclass
class Health:
    state: str  # "poisoned" | "healthy" | "unknown"
    detail: str
    error: str | None = None
    source: str = "cuda"  # "cuda" | "fault_injection" | "none"

    def to_dict(self) -> dict:
        return asdict(self)


class Probe(Protocol):
    name: str

    def check(self) -> Health: ...


class CudaProbe:
    """The real one: asks torch only if torch is imported and CUDA already initialised in this process."""

    name = "cuda"

    def check(self) -> Health:
        torch = sys.modules.get("torch")
        if torch is None:
            return Health("unknown", "torch is not imported in this process", source="none")
        try:
            initialised = bool(torch.cuda.is_initialized())
        except Exception as exc:  # a torch too old or broken to answer
            return Health("unknown", f"torch.cuda could not be queried ({exc})", source="none")
        if not initialised:
            return Health("unknown", "CUDA was never initialised in this process", source="none")
        try:
            torch.cuda.synchronize()
            (torch.ones(1, device="cuda") + 1).cpu()
        except Exception as exc:
            text = str(exc)
            if catalog.sticky_verdict(text) is False:
                return Health("healthy", "the GPU is out of memory, but the context works", text)
            return Health("poisoned", "a sticky CUDA error: every CUDA call in this process now fails", text)
        return Health("healthy", "a test kernel ran and copied back: the CUDA context works")


_override: Probe | None = None
_internal = threading.local()


def active_probe() -> Probe:
    return _override if _override is not None else CudaProbe()


def set_probe(probe: Probe | None) -> None:
    """Install a stand-in probe (``None`` restores the real one). Used by ``nb_cudaguard.testing``."""
    global _override
    _override = probe


@contextmanager
def internal_use() -> Iterator[None]:
    """Marks the extension's own tensor reads. It opens nothing: a poisoned GPU refuses them like the user's, and so
    does the simulated one (``nb_cudaguard.testing``), which counts the refusals so that tests can prove the
    diagnosis decides from metadata before it reads and never tries."""
    previous = getattr(_internal, "active", False)
    _internal.active = True
    try:
        yield
    finally:
        _internal.active = previous


def in_internal_use() -> bool:
    return getattr(_internal, "active", False)
