"""How the new process runs what the restart left it: the replayed cells (numbered as the user saw them,
interruptible, their output kept for the report) and the requests kept during the restart."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator

from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.relaunch import iopub_clients
from nb_cudaguard.relaunch import kernel_internals as internals

OUTPUT_TAIL = 2000


class KeptRequests:
    """The shell requests that reached the old process during the restart, answered here once clients are back."""

    def __init__(self, kernel, frames: list[list[bytes]]) -> None:
        self.kernel = kernel
        self.frames = frames
        self._task: asyncio.Future | None = None  # the scheduled refusal, kept referenced until it ends

    async def run(self) -> int:
        """Run each request as if it had just arrived, in order, replying to its own client."""
        for frames in self.frames:
            await internals.dispatch_raw(self.kernel, frames)
        return len(self.frames)

    def refuse_first(self, reason: str) -> None:
        """Schedule ``refuse`` (called on the event loop): ahead of every request on ipykernel 7, whose shell lock
        it takes; beside ipykernel 6's queue, which must stay free to end the abort a refused cell starts."""
        self._task = asyncio.ensure_future(self.refuse(reason))

    async def refuse(self, reason: str) -> None:
        """Answer each *signed* request without running it: an execute request gets a clear error instead. Under
        the shell lock (ipykernel 7), so that no request runs before these are answered; and, as after a replay,
        the next request waits until a client has subscribed again (see ``iopub_clients``)."""
        if not self.frames:
            return
        lock = internals.main_lock(self.kernel)
        async with lock if lock is not None else contextlib.nullcontext():
            await iopub_clients.wait_for_clients(self.kernel)
            session = self.kernel.session
            for frames in self.frames:
                try:
                    idents, rest = session.feed_identities(frames)
                    msg = session.deserialize(rest)  # checks the request's own signature with the kernel's key
                except Exception:
                    continue  # not from a client of this kernel: not answered
                if msg["header"].get("msg_type") == "execute_request":
                    text = f"nb_cudaguard: this cell was sent while the kernel restarted and was not run. {reason}"
                    msg["content"] = {**msg["content"], "code": f"raise RuntimeError({text!r})", "silent": False}
                await internals.dispatch_raw(self.kernel, session.serialize(msg, ident=idents))
            await iopub_clients.hold_until_subscribed(self.kernel)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """A kernel ignores SIGINT outside its request handlers and turns it into KeyboardInterrupt inside them (its
    ``pre_handler_hook``). The replay runs outside any handler, so without this the Interrupt button could not stop
    a long replayed cell, and the user's next cell would wait for it. As in a handler, only while a cell runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def numbered(shell, record: CellRecord) -> Iterator[None]:
    """A cell run again is compiled under its own number, so that a traceback through code it defines (a model's
    ``forward``) names the cell the user sees as ``[4]``, not the number the next cell will get."""
    after = shell.execution_count
    if record.execution_count is not None:
        shell.execution_count = record.execution_count
    try:
        yield
    finally:
        shell.execution_count = after


def under_exact_checks(record: CellRecord) -> str:
    """A recorded cell's source as ``run_cell`` runs it under the exact checks, its lines numbered as recorded
    (run inside ``numbered``, it keeps its label too)."""
    return "%%cudacheck --as-recorded\n" + record.source


def tail(text: str) -> str:
    text = text.strip()
    return f"\n{text[-OUTPUT_TAIL:]}" if text else ""


class _Buffer:
    def __init__(self, capture) -> None:
        self.capture = capture

    def text(self) -> str:
        return self.capture.stdout + self.capture.stderr


@contextlib.contextmanager
def captured():
    """The replayed cells' Python-level output and displays, kept for the report instead of being shown."""
    from IPython.utils.capture import capture_output

    with capture_output() as capture:
        yield _Buffer(capture)
