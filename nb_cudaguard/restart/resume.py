"""The new process's side of a restart: take the handoff, carry the journal over, replay, then run the requests
that arrived during the restart, and tell the user at their next cell.

In a kernel the replay runs as the first thing on the event loop and holds the shell's lock, so every request that
comes in meanwhile waits behind it (a cell run now simply waits for the replay) and runs afterwards, in order.
Output of replayed cells is captured, not shown: the user sees a progress line, a one-line summary at the next
cell, and the full report (what ran, what failed, what state exists) when a cell fails or on
``%cudaguard replay --report``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord, Journal, JournalError
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import ReplayPlan

# Clients retry their connection every 100 ms (libzmq's default), and a reply sent before a client is back is
# dropped by the ROUTER socket, its output by the PUB socket: after the replay, requests are answered once a client
# is back on iopub (its welcome message, or its TCP connection: see wait_for_clients), or at the latest this long
# after the sockets were bound; on a loaded machine a client's iopub can take most of a second to come back.
_CLIENT_WAIT = 1.0
_OUTPUT_TAIL = 2000


@dataclass
class ReplayOutcome:
    plan: ReplayPlan
    how: str
    pid: int
    restarts: int
    ran: list[tuple[CellRecord, float]] = field(default_factory=list)
    failed: CellRecord | None = None
    error: str | None = None
    output: str = ""
    seconds: float = 0.0
    served: int = 0
    diagnosis: str | None = None
    names: list[str] = field(default_factory=list)
    done: bool = False
    children_ended: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    carry_note: str | None = None

    @property
    def not_run(self) -> list[CellRecord]:
        ran = {record.seq for record, _ in self.ran}
        failed = self.failed.seq if self.failed is not None else None
        return [r for r in self.plan.records if r.seq not in ran and r.seq != failed]

    def summary(self) -> str:
        how = "exec, same PID" if self.how == "exec" else "exit and auto-restart by the kernel manager"
        parts = [
            f"nb_cudaguard: restarted ({how}, PID {self.pid})",
            f"replayed {len(self.ran)}/{len(self.plan.steps)} cell(s) in {self.seconds:.2f} s",
            f"{1 if self.failed is not None else 0} failure(s)",
        ]
        if self.carry_note:
            parts.append(self.carry_note)
        if self.failed is not None:
            parts.append(f"stopped at {self.failed.label}: {self.error}")
        if self.served:
            parts.append(f"{self.served} request(s) from the restart window run")
        if self.diagnosis:
            parts.append(f"diagnosis: {self.diagnosis.splitlines()[0][:160]}")
        return " · ".join(parts)

    def to_text(self) -> str:
        lines = [self.summary(), "Ran:"]
        lines += [f"  {r.label:>6} {s:8.2f} s  {r.first_line[:60]}" for r, s in self.ran] or ["  (nothing)"]
        if self.failed is not None:
            lines += [f"Failed: {self.failed.label} {self.failed.first_line[:60]}", f"  {self.error}"]
            if self.output.strip():
                lines += ["  Its output (end):", *("    " + line for line in self.output.strip().splitlines()[-15:])]
        if self.not_run:
            lines.append("Not run: " + ", ".join(r.label for r in self.not_run))
        if self.plan.excluded:
            lines.append("Left out by the plan: " + ", ".join(s.record.label for s in self.plan.excluded))
        if self.carried:
            lines.append("Carried across the restart: " + ", ".join(self.carried))
        lines.append("Names that exist now: " + (", ".join(self.names) if self.names else "(none)"))
        if self.children_ended:
            lines.append("Child processes ended before the restart: " + ", ".join(self.children_ended))
        if self.diagnosis:
            lines.append("Diagnosis (the failing cell under %%cudacheck):")
            lines += ["  " + line for line in self.diagnosis.splitlines()]
        return "\n".join(lines)


def resume_after_restart(shell, guard) -> None:
    """Called whenever the extension loads: if a handoff waits for this process, take it and rebuild."""
    binding = handoff.binding_for(shell)
    announced = os.environ.pop(handoff.ENV_PATH, None)
    os.environ.pop("NB_CUDAGUARD_EXEC_AT", None)
    path = handoff.pending(binding)
    if path is None:
        if announced:
            guard.restart_failure = f"nb_cudaguard: the restart handoff {announced} is missing; nothing was replayed."
        return
    try:
        payload = handoff.consume(binding, path)
    except handoff.HandoffError as exc:
        guard.restart_failure = str(exc)
        from nb_cudaguard.carry.files import discard_all

        discard_all(binding)  # values that came with it are never read
        _log(shell, str(exc))
        show_at_next_cell(shell, lambda: guard.restart_failure)
        kernel = getattr(shell, "kernel", None)
        if kernel is not None and isinstance(exc.document, dict):
            from tornado.ioloop import IOLoop

            kept = _KeptRequests(kernel, _frames(exc.document.get("payload", {})))
            IOLoop.current().add_callback(kept.refuse, "The restart handoff was refused (see the kernel log).")
        return
    finally:
        os.environ.pop(handoff.ENV_SECRET, None)
    try:
        journal = Journal.from_json(payload["journal"], guard.journal_max_cells, guard.journal_max_bytes)
        plan = ReplayPlan.from_dict(payload["plan"], journal)
    except (JournalError, KeyError, TypeError, ValueError) as exc:  # signed by us, so a bug: say so, run nothing
        guard.restart_failure = f"nb_cudaguard: the restart handoff could not be read ({exc}); nothing was replayed."
        _log(shell, guard.restart_failure)
        show_at_next_cell(shell, lambda: guard.restart_failure)
        return
    guard.journal = journal
    guard.restarts = int(payload.get("restarts", 1))
    if payload.get("execution_count"):
        shell.execution_count = int(payload["execution_count"])
    _Resume(shell, guard, payload, plan).start()


def load_after_exit(shell, startup_file: str) -> None:
    """Run by the startup file the exit path leaves: load nb_cudaguard (which replays) only in the kernel the
    handoff belongs to, and remove the file there."""
    if handoff.pending(handoff.binding_for(shell)) is None:
        return
    os.unlink(startup_file)
    shell.run_line_magic("load_ext", "nb_cudaguard")


def _seconds_since_bind(kernel) -> float:
    """How long ago the sockets were bound: ipykernel starts its iopub thread right after binding, and Linux
    records each thread's start (in clock ticks since boot). 0 where that cannot be read."""
    thread = getattr(getattr(kernel, "iopub_thread", None), "thread", None)
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as uptime:
            return max(0.0, float(uptime.read().split()[0]) - started)
    except (AttributeError, OSError, ValueError, IndexError):
        return 0.0


def _frames(payload: dict) -> list[list[bytes]]:
    try:
        return [[base64.b64decode(frame) for frame in frames] for frames in payload.get("pending", [])]
    except (TypeError, ValueError, AttributeError):
        return []


def _log(shell, text: str) -> None:
    log = getattr(getattr(shell, "kernel", None), "log", None)
    if log is not None:
        log.warning(text)
    else:
        print(text, flush=True)


def show_at_next_cell(shell, message) -> None:
    """Print ``message()`` at the start of the user's next cell, once."""

    def show(*_args) -> None:
        shell.events.unregister("pre_run_cell", show)
        text = message()
        if text:
            print(text, flush=True)

    shell.events.register("pre_run_cell", show)


class _Resume:
    def __init__(self, shell, guard, payload: dict, plan: ReplayPlan) -> None:
        self.shell = shell
        self.guard = guard
        self.payload = payload
        self.kernel = getattr(shell, "kernel", None)
        self.options = payload.get("options", {})
        self.outcome = ReplayOutcome(
            plan,
            how=payload.get("how", "exec"),
            pid=os.getpid(),
            restarts=guard.restarts,
            children_ended=list(payload.get("children_ended", [])),
        )
        guard.last_replay = self.outcome
        self.requests = _KeptRequests(self.kernel, _frames(payload)) if self.kernel is not None else None
        self.carried = None  # CarriedValues until they are taken

    def start(self) -> None:
        if self.options.get("carry"):
            from nb_cudaguard.carry.files import CarriedValues

            self.carried = CarriedValues(self.options["carry"])  # starts reading at once
        show_at_next_cell(self.shell, self._next_cell_text)
        if self.kernel is not None:
            from tornado.ioloop import IOLoop

            clients_back(self.kernel)  # watch for the first welcome from now on
            IOLoop.current().add_callback(self._schedule)
        else:
            self.run_sync()

    def _next_cell_text(self) -> str:
        text = self.outcome.summary()
        if self.outcome.failed is not None:
            text += "\n" + self.outcome.to_text().split("\n", 1)[1] + "\n(%cudaguard replay --report shows this again)"
        return text

    # --- drivers
    def _schedule(self) -> None:
        """Run the replay ahead of every request. ipykernel 7 runs requests under its main lock, which the replay
        takes first; ipykernel 6 runs them one at a time from its message queue, where the replay goes first (the
        loop has just started, so nothing is queued yet)."""
        if getattr(self.kernel, "_main_asyncio_lock", None) is None and hasattr(self.kernel, "schedule_dispatch"):
            self.kernel.schedule_dispatch(self.run_async)
        else:
            self._task = asyncio.ensure_future(self.run_async())

    async def run_async(self) -> None:
        lock = getattr(self.kernel, "_main_asyncio_lock", None)
        async with lock if lock is not None else contextlib.nullcontext():
            started = time.perf_counter()
            for index, record in enumerate(self._cells(), 1):
                self._progress(index, record)
                result, output, seconds = await self._run_async(record.source)
                if not self._record(record, result, output, seconds):
                    break
            self._finish_replay(started)
            await wait_for_clients(self.kernel)  # what runs next must not publish into the void
            if self.requests is not None:
                self.outcome.served = await self.requests.run()

    def run_sync(self) -> None:
        started = time.perf_counter()
        for index, record in enumerate(self._cells(), 1):
            self._progress(index, record)
            begun = time.perf_counter()
            with _captured() as output:
                result = self.shell.run_cell(record.source, silent=True)
            if not self._record(record, result, output.text(), time.perf_counter() - begun):
                break
        self._finish_replay(started)

    async def _run_async(self, source: str):
        shell = self.shell
        try:
            transformed, error = shell.transform_cell(source), None
        except Exception:
            transformed, error = source, sys.exc_info()
        begun = time.perf_counter()
        with _captured() as output, _interruptible():
            if error is None and not shell.should_run_async(source, transformed_cell=transformed):
                result = shell.run_cell(source, silent=True)
            else:
                result = await shell.run_cell_async(
                    source, silent=True, transformed_cell=transformed, preprocessing_exc_tuple=error
                )
        return result, output.text(), time.perf_counter() - begun

    def _cells(self) -> Iterator[CellRecord]:
        """The cells to replay, in order. The carried values, read on a thread meanwhile, go into the namespace
        just before the position of the first cell the carry plan skips; if they cannot be used, the plain plan's
        cells from that position on run instead: nothing runs twice or out of order, nothing is lost."""
        if self.carried is None:
            yield from (step.record for step in self.outcome.plan.steps)
            return
        position = self.carried.first_skipped
        yield from (step.record for step in self.outcome.plan.steps if step.record.seq < position)
        self._take_carried()
        yield from (step.record for step in self.outcome.plan.steps if step.record.seq >= position)

    def _take_carried(self) -> None:
        carried, self.carried = self.carried, None
        failure = carried.take(self.shell)
        if failure is None:
            self.outcome.carried, self.outcome.carry_note = carried.names, carried.note
            return
        self.outcome.plan = ReplayPlan.from_dict(carried.manifest["base_plan"], self.guard.journal)
        position = self.guard.journal.by_seq(carried.first_skipped)
        self.outcome.carry_note = (
            f"carried values not used ({failure}); replaying the cells that built them, from "
            f"{position.label if position is not None else 'there'}"
        )
        _log(self.shell, "nb_cudaguard: " + self.outcome.carry_note)

    # --- bookkeeping
    def _record(self, record: CellRecord, result, output: str, seconds: float) -> bool:
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            self.outcome.ran.append((record, seconds))
            return True
        self.outcome.failed = record
        self.outcome.error = "".join(traceback.format_exception_only(type(error), error)).strip()
        self.outcome.output = output[-_OUTPUT_TAIL:]
        return False

    def _finish_replay(self, started: float) -> None:
        """Carried values the replay did not reach (it stopped early), time, names, the optional diagnosis, then
        mark the replay done (the next cell waits for that)."""
        if self.carried is not None:
            self._take_carried()
        self.outcome.seconds = time.perf_counter() - started
        self.outcome.names = sorted(
            name
            for name in self.shell.user_ns
            if not name.startswith("_") and name not in self.shell.user_ns_hidden and name not in ("In", "Out")
        )
        if self._should_diagnose():
            self.outcome.diagnosis = self._diagnose()
        self.outcome.done = True
        self._progress_done()

    def _should_diagnose(self) -> bool:
        return bool(self.options.get("diagnose")) and self.outcome.failed is None and self.outcome.plan.target

    def _diagnose(self) -> str:
        """Run the failing cell again under ``%%cudacheck``, which checks the inputs of assert-prone ops before
        they launch, so it names the bad values instead of poisoning the GPU again."""
        try:
            import nb_cudaguard.check.mode  # noqa: F401  (the %%cudacheck checks; a separate part of the package)
        except ImportError:
            return "skipped: the %%cudacheck checks (nb_cudaguard.check) are not part of this installation"
        source = self.outcome.plan.target.source
        with _captured() as output, _interruptible():
            result = self.shell.run_cell("%%cudacheck\n" + source, silent=True)
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return "the failing cell ran without a failure under %%cudacheck" + _tail(output.text())
        return "".join(traceback.format_exception_only(type(error), error)).strip()

    # --- what the user sees while it runs
    def _progress(self, index: int, record: CellRecord) -> None:
        total = len(self.outcome.plan.steps)
        self._publish(
            f"nb_cudaguard: replaying {index}/{total}: {record.label} {record.first_line[:60]} "
            f"({record.duration:.2f} s as recorded)"
        )

    def _progress_done(self) -> None:
        self._publish(self.outcome.summary())

    def _publish(self, text: str) -> None:
        if self.kernel is None:
            print(text, flush=True)
            return
        self.kernel.log.info(text)
        display_id = self.payload.get("display_id")
        if display_id is None:
            return
        content = {"data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": display_id}}
        parent = {"header": self.payload.get("parent_header") or {}}
        topic = self.kernel._topic("update_display_data") if hasattr(self.kernel, "_topic") else None
        self.kernel.session.send(self.kernel.iopub_socket, "update_display_data", content, parent, ident=topic)


class _KeptRequests:
    """The shell requests that reached the old process during the restart, answered here once clients are back."""

    def __init__(self, kernel, frames: list[list[bytes]]) -> None:
        self.kernel = kernel
        self.frames = frames

    async def run(self) -> int:
        """Run each request as if it had just arrived, in order, replying to its own client."""
        if not self.frames:
            return 0
        import zmq

        for frames in self.frames:
            await self.kernel.dispatch_shell([zmq.Frame(frame) for frame in frames])
        return len(self.frames)

    async def refuse(self, reason: str) -> None:
        """Answer each *signed* request without running it: an execute request gets a clear error instead."""
        if not self.frames:
            return
        await wait_for_clients(self.kernel)
        import zmq

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
            signed = session.serialize(msg, ident=idents)
            await self.kernel.dispatch_shell([zmq.Frame(frame) for frame in signed])


async def wait_for_clients(kernel) -> None:
    """Until a client is back on iopub, or ``_CLIENT_WAIT`` after the sockets were bound."""
    bound_at = time.monotonic() - _seconds_since_bind(kernel)
    while not clients_are_back(kernel) and time.monotonic() - bound_at < _CLIENT_WAIT:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the shell socket reconnects alongside iopub


def clients_are_back(kernel) -> bool:
    """Has a client come back to iopub (so that what is published now reaches it)?"""
    return clients_back(kernel).is_set() or _iopub_peer(kernel)


def _iopub_peer(kernel) -> bool:
    """A client's TCP connection to the iopub port: its subscription follows in the same handshake. The one sign on
    ipykernel 6 (a PUB socket, no welcome message), and on ipykernel 7 the sign that the first welcome went out
    before ``clients_back`` could watch for it (the extension loads after the kernel binds)."""
    try:
        import psutil
        import zmq

        endpoint = kernel.iopub_thread.socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        port = int(endpoint.rsplit(":", 1)[1])
        process = psutil.Process()
        listing = getattr(process, "net_connections", None) or process.connections
        return any(c.laddr and c.laddr.port == port and c.raddr for c in listing(kind="tcp"))
    except Exception:
        return False


def clients_back(kernel) -> threading.Event:
    """Set when a client subscribes to iopub again (ipykernel then sends its welcome message): replies and output
    sent before that would be dropped. One wrapper per process, shared by every waiter."""
    iopub = getattr(kernel, "iopub_thread", None)
    welcome = getattr(iopub, "_send_welcome_message", None)
    if welcome is None:
        return threading.Event()
    existing = getattr(welcome, "clients_back", None)
    if existing is not None:
        return existing
    back = threading.Event()

    def send_welcome(subscription, _inner=welcome):
        back.set()
        return _inner(subscription)

    send_welcome.clients_back = back
    iopub._send_welcome_message = send_welcome
    return back


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
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


def _tail(text: str) -> str:
    text = text.strip()
    return f"\n{text[-_OUTPUT_TAIL:]}" if text else ""


class _Buffer:
    def __init__(self, capture) -> None:
        self.capture = capture

    def text(self) -> str:
        return self.capture.stdout + self.capture.stderr


@contextlib.contextmanager
def _captured():
    """The replayed cells' Python-level output and displays, kept for the report instead of being shown."""
    from IPython.utils.capture import capture_output

    with capture_output() as capture:
        yield _Buffer(capture)
