"""The fast checks: assert-prone ops checked on the device with no synchronisation, read once at the end.

``with FastChecker():`` puts the fast entry points in place (``fast.entries``), lets the block run at full speed
(ops without a device assert are untouched; each assert-prone op adds a few tensor ops on its own stream and runs
on safe values, so no kernel can assert and the CUDA context never poisons), then reads the boards once and
raises :class:`~nb_cudaguard.check.fast.error.FastCheckError` if a check fired. Several checkers may be entered
at once (the every-cell checks and a script's block): the entry points stay in place until the last one leaves.

The exact mode (``mode.Checker``) suspends the fast checks while it is on: it sees the real arguments and stops
the op itself.
"""

from __future__ import annotations

import sys

from nb_cudaguard.check import render
from nb_cudaguard.check.fast.board import BOARD
from nb_cudaguard.check.fast.casts import CASTS
from nb_cudaguard.check.fast.entries import PATCHES
from nb_cudaguard.check.fast.error import FastCheckError, Rebuilds, consequences, error_from, narrowed
from nb_cudaguard.check.fast.known import KNOWN
from nb_cudaguard.check.fast.readable import forget
from nb_cudaguard.check.fast.sites import SITES


class FastChecker:
    """``namespace``: the user's globals, to name their tensors; ``rebuilds``: the session's answer to which cells
    rebuild what a fired check made wrong (``fast.error.Rebuilds``)."""

    def __init__(self, namespace: dict | None = None, rebuilds: Rebuilds | None = None) -> None:
        self.namespace = namespace
        self.rebuilds = rebuilds
        self.active = False

    def __enter__(self) -> FastChecker:
        render.install()
        BOARD.active += 1
        self.active = True
        if BOARD.active == 1:
            PATCHES.install()
            if _drop_compiled_code():
                print("nb_cudaguard: torch.compile'd code recompiles once, with the fast checks", file=sys.stderr)
        BOARD.prepare()
        if self.namespace is not None:
            SITES.namespace = self.namespace
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            error = self.finish()
        finally:
            self.leave()
        if error is not None:
            raise error from exc

    def leave(self) -> None:
        if not self.active:
            return
        self.active = False
        BOARD.active -= 1
        if BOARD.active == 0:
            CASTS.clear()
            KNOWN.clear()
            forget()
            left = PATCHES.uninstall()
            if left:
                print(f"nb_cudaguard: left in place what replaced {', '.join(left)} meanwhile", file=sys.stderr)

    def finish(self, source: str | None = None) -> FastCheckError | None:
        """Read the boards (one transfer per device) and, if a check fired, the error; the boards are zeroed."""
        firings = BOARD.read()
        if not firings:
            return None
        BOARD.reset()
        error = error_from(
            [(f, SITES.by_number.get(f.site)) for f in firings], consequences(source, self.rebuilds, self.namespace)
        )
        return narrowed(error, self.namespace)

    def check(self) -> None:
        """Read the boards now and raise if a check fired (a script's own checkpoint, e.g. every N steps)."""
        error = self.finish()
        if error is not None:
            raise error


def _drop_compiled_code() -> bool:
    """Code Dynamo compiled before the checks were on called torch's functions directly, and Dynamo does not guard
    on torch's own functions, so it would go on running unchecked: drop it, so that it recompiles with the checks.
    (Code compiled with the checks guards on the wrappers and recompiles by itself when they are gone.)"""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    if convert_frame is None or not getattr(getattr(convert_frame, "input_codes", None), "seen", None):
        return False
    import torch

    torch._dynamo.reset_code_caches()
    return True


def fast_checking(namespace: dict | None = None) -> FastChecker:
    """The fast checks for scripts: ``with fast_checking(): train()``; raises at the end if a check fired."""
    return FastChecker(namespace=namespace)
