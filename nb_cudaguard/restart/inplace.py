"""``nb_cudaguard.restart()``: restart the kernel in place (same PID, connection file and ports) and rebuild the
session in the new process.

A device-side assert poisons the CUDA context until the process ends, so recovery needs a new process. Asking the
frontend for a restart needs frontend code (and each frontend differs); killing the process shows a crash dialog.
An ``exec`` of the kernel's own command line keeps the PID, which is all a kernel manager watches, so no frontend
notices anything but a short pause. In order:

1. the request that asked for the restart is answered first: the exec is scheduled on the kernel's event loop and
   waits until the reply and the ``idle`` status of that request have gone out;
2. shell requests that arrive meanwhile are not run: they are kept, with their signatures, and so are those still
   waiting in the shell socket when it stops being read; they go into the handoff and the new process runs them
   after the replay, in their original order, replying to their original client;
3. children end, the handoff (plan, journal, options, requests) is written, the channels are flushed and closed,
   fds 1/2 are restored, every other fd becomes close-on-exec, and the process execs itself with
   ``--ext=nb_cudaguard``;
4. if the exec fails, the process exits instead: a kernel manager with auto-restart (jupyter_server) brings the
   kernel back, a one-shot startup file loads nb_cudaguard there, and the replay happens as after an exec.

Terminal IPython has no requests to keep: the exec happens at once, from inside the cell.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import MODES, ReplayPlan, build_plan
from nb_cudaguard.restart import reexec

RESTART_STATUS = "restart"
_SETTLE_SECONDS = 0.01
_SETTLE_LIMIT = 0.5
_CLOSE_TIMEOUT = 3.0
_IOPUB_GRACE = 0.01
_STARTUP_FILE = "00-nb_cudaguard-resume.py"
# Sent by the stopping shell channel thread behind the last request it forwarded (see _stop_shell_channel_thread).
_END_OF_REQUESTS = b"nb_cudaguard: end of requests"


class RestartError(RuntimeError):
    """The restart could not start; the session is unchanged."""


def restart(
    replay: str = "minimal",
    diagnose: bool = False,
    cells: Iterable[int] | None = None,
    add: Iterable[int] = (),
    drop: Iterable[int] = (),
    *,
    method: str = "exec",
    shell=None,
    carry: bool | None = None,
    carry_names: Iterable[str] = (),
    no_carry: Iterable[str] = (),
    replay_cells: Iterable[int] = (),
) -> ReplayPlan:
    """Restart this kernel in place and replay the recorded cells the failing cell needs.

    ``replay``: "minimal" (cells that rebuild what the failing cell reads), "all" (every successful cell) or
    "none". ``cells``/``add``/``drop``: execution counts that replace or edit that plan. ``diagnose``: after the
    replay, run the failing cell again under ``%%cudacheck``. ``method="exit"`` skips the exec and lets the kernel
    manager's auto-restart bring the kernel back (for platforms without exec). Returns the plan; the restart itself
    happens just after the calling cell has finished.

    ``carry`` (default ``CudaGuard.carry``): values that live on the CPU are pickled now and restored in the new
    process, and the cells that built them are skipped where that is faster (see ``carry_plan``).
    ``carry_names``/``no_carry``: names to carry or not whatever the plan prefers; ``replay_cells``: execution
    counts of cells to replay even though their values could be carried.
    """
    from nb_cudaguard import get_guard, load_ipython_extension

    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        raise RestartError("nb_cudaguard.restart() runs inside IPython or a Jupyter kernel.")
    if replay not in MODES:
        raise RestartError(f"replay must be one of {', '.join(MODES)}, not {replay!r}")
    if method not in ("exec", "exit"):
        raise RestartError(f"method must be 'exec' or 'exit', not {method!r}")
    load_ipython_extension(shell)
    guard = get_guard(shell)
    if getattr(guard, "restarting", False):
        raise RestartError("nb_cudaguard: a restart is already under way.")
    plan = build_plan(guard.journal, replay, add=add, drop=drop, cells=list(cells) if cells is not None else None)
    options = {"replay": replay, "diagnose": bool(diagnose), "method": method}
    if (guard.carry if carry is None else carry) and plan.steps and plan.target is not None:
        from nb_cudaguard.carry.files import prepare

        plan, options["carry"], carry_plan = prepare(shell, guard, plan, carry_names, no_carry, replay_cells)
        if options["carry"] is not None:
            print(carry_plan.to_text(), flush=True)
    if getattr(getattr(shell, "kernel", None), "session", None) is not None:
        _KernelRestart(shell, guard, plan, options).arm()
    elif type(shell).__name__ == "TerminalInteractiveShell":
        _restart_terminal(shell, guard, plan, options)
    else:
        kind = type(shell).__name__
        raise RestartError(f"nb_cudaguard cannot restart a {kind}: only ipykernel kernels and terminal IPython.")
    return plan


def _payload(shell, guard, plan: ReplayPlan, options: dict, **extra) -> dict:
    return {
        "plan": plan.to_dict(),
        "journal": guard.journal.to_json(),
        "options": options,
        "pid": os.getpid(),
        "execution_count": shell.execution_count,
        "restarts": getattr(guard, "restarts", 0) + 1,
        "requested_at": time.time(),
        **extra,
    }


def _announce(plan: ReplayPlan, how: str) -> str:
    if plan.steps:
        what = f"then replaying {len(plan.steps)} cell(s) ({plan.mode}, {plan.recorded_seconds:.1f} s as recorded)"
    else:
        what = "with no replay"
    return f"nb_cudaguard: restarting {how} in place (PID {os.getpid()}), {what}."


def _mark_restart_cell(record) -> None:
    """The cell that asked for the restart must never be replayed (it would restart again)."""
    if record is not None:
        record.status = RESTART_STATUS


def _restart_terminal(shell, guard, plan: ReplayPlan, options: dict) -> None:
    _mark_restart_cell(getattr(guard, "_current", None))
    binding = handoff.binding_for(shell, create_secret=True)
    children = reexec.end_children()
    payload = _payload(shell, guard, plan, options, children_ended=children, how="exec")
    payload["execution_count"] = _next_count(shell)
    path = handoff.write(binding, payload)
    print(_announce(plan, "IPython"), flush=True)
    try:
        shell.history_manager.end_session()
    except Exception:
        pass
    guard.unregister()
    os.environ[handoff.ENV_PATH] = str(path)
    reexec.mark_fds_cloexec()
    try:
        reexec.exec_self(reexec.exec_argv())
    except OSError as exc:
        path.unlink(missing_ok=True)
        os.environ.pop(handoff.ENV_PATH, None)
        guard.register()
        raise RestartError(f"nb_cudaguard: the exec failed ({exc}); this IPython keeps running unchanged.") from exc


def _next_count(shell) -> int:
    """The number of the cell after this one, from inside this one: IPython 9 moves its counter before a cell
    runs, earlier versions after it, but every version stores the running cell in the history under its number
    first."""
    stored = len(getattr(shell.history_manager, "input_hist_raw", ()))  # entry 0 is a placeholder
    return max(shell.execution_count, stored)


class _KernelRestart:
    """One restart of an ipykernel kernel, from the cell that asks for it to the exec."""

    def __init__(self, shell, guard, plan: ReplayPlan, options: dict) -> None:
        self.shell = shell
        self.guard = guard
        self.kernel = shell.kernel
        self.plan = plan
        self.options = options
        self.pending: list[list[bytes]] = []
        self.record = getattr(guard, "_current", None)
        self.journal_json: str | None = None
        self.children: list[str] = []
        self._queue: _KeptQueue | None = None
        self._end_reached = asyncio.Event()
        self.binding = handoff.binding_for(shell, create_secret=True)

    # --- in the cell
    def arm(self) -> None:
        from IPython.display import display

        parent = self._parent_header()
        self.display_id = f"nb_cudaguard-restart-{os.getpid()}-{time.monotonic_ns()}"
        display({"text/plain": _announce(self.plan, "the kernel")}, raw=True, display_id=self.display_id)
        self.parent = parent
        self.guard.restarting = True
        self._capture_requests()
        self.kernel.io_loop.add_callback(self._finish)

    def _parent_header(self) -> dict:
        getter = getattr(self.kernel, "get_parent", None)
        try:
            parent = getter("shell") if getter is not None else self.kernel._parent_header
        except TypeError:  # ipykernel 6: get_parent() takes no channel
            parent = getter()
        header = parent.get("header", {}) if isinstance(parent, dict) else {}
        return json.loads(json.dumps(header, default=str))  # its date is a datetime

    def _capture_requests(self) -> None:
        """From now on, shell requests are kept, still signed, for the new process instead of being run here.

        A kept request is never deserialised and no ``busy``/``idle`` goes out for it (an early ``idle`` would make
        a frontend stop listening for the request's output). ipykernel 7 looks ``dispatch_shell`` up on the
        instance for every request, so it is replaced there. ipykernel 6 binds ``dispatch_shell`` at start but puts
        every shell request in ``kernel.msg_queue``, looked up on each use, so that queue is stood in for.
        """
        kernel = self.kernel

        if hasattr(kernel, "shell_main"):

            async def keep_raw(msg, /, subshell_id=None, *, concurrent=False):
                if len(msg) > 1:
                    self.pending.append(_raw(msg))
                elif bytes(getattr(msg[0], "bytes", msg[0])) == _END_OF_REQUESTS:
                    self._end_reached.set()
                # any other single frame is ipykernel's internal "stop aborting" marker

            kernel.dispatch_shell = keep_raw
            return
        self._queue = _KeptQueue(kernel.msg_queue, self.pending)
        kernel.msg_queue = self._queue

    def _release_requests(self) -> None:
        self.kernel.__dict__.pop("dispatch_shell", None)
        if self._queue is not None:
            self.kernel.msg_queue = self._queue.original
            self._queue.released.set()

    # --- on the event loop, after the reply
    async def _finish(self) -> None:
        stage = "preparing"
        try:
            await self._after_restart_request()
            _mark_restart_cell(self.record)
            self.journal_json = self.guard.journal.to_json()  # once: the last write sits right before the exec
            self._write([])  # early, so that a handoff we cannot write stops us before anything is closed
            stage = "stopping"
            socket = await self._stop_reading_requests()
            self.children = reexec.end_children()
            self.guard.unregister()
            reexec.restore_std_fds()
            self._flush_iopub()
            # The shell socket stays open to the last moment and is read once more just before the exec: a
            # request that reaches it unread is lost with it, while one sent after the exec waits in its client's
            # queue until the new process binds the same port. The clients are first told to go (see
            # _let_clients_go), so that no request can still be on its way when that last read happens.
            _let_clients_go(socket)
            self.pending += _drain(socket)
            path = self._write(self.children)
            os.environ[handoff.ENV_PATH] = str(path)
            stage = "exec"
            if self.options["method"] == "exit":
                raise OSError("the exit path was asked for")
            reexec.mark_fds_cloexec()
            reexec.exec_self(reexec.exec_argv())
        except BaseException as exc:
            if stage == "preparing":
                await self._abort(exc)
            else:
                self._exit_for_autorestart(exc, stage)

    async def _after_restart_request(self) -> None:
        lock = getattr(self.kernel, "_main_asyncio_lock", None)
        if lock is not None:
            async with lock:  # held by the restart request until its reply and idle are sent
                pass
        else:
            try:  # ipykernel 6 asks its queue for the next request once the restart request is answered
                await asyncio.wait_for(self._queue.answered.wait(), _CLOSE_TIMEOUT)
            except asyncio.TimeoutError:
                await self._settle()

    async def _settle(self) -> None:
        """Let requests already inside the process reach the capture, until none arrives for a moment."""
        deadline = time.monotonic() + _SETTLE_LIMIT
        seen = -1
        while len(self.pending) != seen and time.monotonic() < deadline:
            seen = len(self.pending)
            await asyncio.sleep(_SETTLE_SECONDS)

    async def _stop_reading_requests(self):
        """Stop the shell socket's reader and the shell channel thread; keep what is queued; return the socket."""
        kernel = self.kernel
        thread = getattr(kernel, "shell_channel_thread", None)
        stream = getattr(thread, "shell_stream", None) or kernel.shell_stream
        if thread is not None:
            await self._stop_shell_channel_thread(thread, stream)
        else:
            stream.stop_on_recv()  # ipykernel 6 queues each request as it reads it: none is in flight after this
        self.pending += _drain(stream.socket)
        return stream.socket

    async def _stop_shell_channel_thread(self, thread, stream) -> None:
        """ipykernel 7: the shell channel thread reads the socket and forwards each request to this thread over an
        inproc PAIR socket, which ``thread.stop()`` closes (``SubshellManager.close``) with whatever it still holds.

        So the thread is stopped only once everything it forwarded has reached the capture. A quiet period cannot
        tell that: a request the thread has read but not yet forwarded (it waits for the GIL or a CPU) can arrive
        after any fixed wait, and was lost with the inproc socket. Instead, once the thread has stopped reading, it
        sends an end marker down the same socket, behind every request it read; the inproc socket, this loop's
        reader and the shell lock are all first-in first-out, so when the marker reaches the capture, every request
        read before it has been kept. What the thread had not read stays in the shell socket, drained afterwards.
        """
        to_main = thread.manager.get_shell_channel_to_subshell_socket(None)  # used by that thread only

        async def end_of_requests() -> None:
            async with thread.asyncio_lock:  # behind any forward still under way
                to_main.send_multipart([_END_OF_REQUESTS])

        def stop_reading() -> None:
            stream.stop_on_recv()
            # A request read just before has its forwarding task queued already: the marker goes behind it.
            thread.io_loop.add_callback(end_of_requests)

        thread.io_loop.add_callback(stop_reading)
        try:
            await asyncio.wait_for(self._end_reached.wait(), _CLOSE_TIMEOUT)
        except asyncio.TimeoutError:  # the thread is stuck: keep what has come, as well as a wait can tell
            kernel_log = getattr(self.kernel, "log", None)
            if kernel_log is not None:
                kernel_log.warning("nb_cudaguard: the shell channel thread did not confirm its last request.")
            await self._settle()
        thread.stop()
        thread.join(timeout=_CLOSE_TIMEOUT)

    def _write(self, children: list[str]) -> Path:
        return handoff.write(
            self.binding,
            _payload(
                self.shell,
                self.guard,
                self.plan,
                self.options,
                children_ended=children,
                journal=self.journal_json,
                pending=[[_b64(frame) for frame in frames] for frames in self.pending],
                parent_header=self.parent,
                display_id=self.display_id,
                how=self.options["method"],
            ),
        )

    def _flush_iopub(self) -> None:
        """Let the iopub thread send what is queued (the restart request's idle, the last output), then stop it."""
        thread = getattr(self.kernel, "iopub_thread", None)
        if thread is not None:
            thread.stop()
            time.sleep(_IOPUB_GRACE)  # libzmq's own I/O thread puts the last messages on the wire

    async def _abort(self, exc: BaseException) -> None:
        """Nothing is closed yet: run the kept requests here after all, in order, and carry on in this process."""
        import zmq

        from nb_cudaguard.restart.resume import show_at_next_cell

        self.guard.restarting = False
        self.guard.restart_failure = (
            f"nb_cudaguard: the restart did not start ({type(exc).__name__}: {exc}); this kernel goes on as it was."
        )
        self.kernel.log.error(self.guard.restart_failure)
        show_at_next_cell(self.shell, lambda: self.guard.restart_failure)
        dispatch = type(self.kernel).dispatch_shell  # not the capture, which still keeps whatever arrives meanwhile
        while self.pending:
            await dispatch(self.kernel, [zmq.Frame(frame) for frame in self.pending.pop(0)])
        self._release_requests()

    def _exit_for_autorestart(self, exc: BaseException, stage: str) -> None:
        """The exec did not happen: exit, and let the kernel manager's auto-restart bring the kernel back."""
        self.options["method"] = "exit"
        try:
            self._write(self.children)
            _write_startup_file(self.shell)
        finally:
            message = (
                f"nb_cudaguard: the in-place restart stopped at '{stage}' ({type(exc).__name__}: {exc}); "
                "exiting so that the kernel manager restarts the kernel. The replay runs when nb_cudaguard "
                "loads there."
            )
            try:
                os.write(2, (message + "\n").encode())
            finally:
                os._exit(1)


class _KeptQueue:
    """Stands in for ipykernel 6's shell message queue during a restart: what is put in is kept, raw and still
    signed, and the one coroutine that takes requests out waits here until the restart is given up (if ever)."""

    def __init__(self, original, pending: list[list[bytes]]) -> None:
        from tornado.queues import QueueEmpty

        self.original = original
        self.pending = pending
        self.answered = asyncio.Event()  # the dispatcher asked for more: the restart request has been answered
        self.released = asyncio.Event()
        while True:
            try:
                self.put_nowait(original.get_nowait())
            except QueueEmpty:
                break

    def put_nowait(self, item) -> None:
        _index, _dispatch, args = item
        self.pending.append(_raw(args[0]))

    def qsize(self) -> int:
        return 0

    def get_nowait(self):
        from tornado.queues import QueueEmpty

        raise QueueEmpty

    async def get(self):
        self.answered.set()
        await self.released.wait()
        return await self.original.get()


def _raw(msg) -> list[bytes]:
    return [bytes(getattr(frame, "bytes", frame)) for frame in msg]


def _drain(socket) -> list[list[bytes]]:
    import zmq

    kept = []
    while True:
        try:
            kept.append(socket.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            return kept
        except zmq.ZMQError:
            return kept


def _let_clients_go(socket, timeout: float = _CLOSE_TIMEOUT) -> int:
    """Half-close every TCP connection of the shell socket and wait until each client has closed its side.

    A request a client writes after the last read of the socket and before the exec would otherwise be lost: its
    client has handed it to TCP, and the exec resets the connection with it. After ``shutdown(SHUT_WR)`` the client's
    libzmq reads end-of-file, drops the connection and queues what it sends next for its reconnect (to the new
    process); libzmq here still reads the connection up to the client's own FIN, which TCP puts behind everything
    the client wrote, so every request sent before that is in the socket's queue when this returns. Returns how many
    connections were closed; 0 where the transport is not TCP or the connections cannot be listed.
    """
    import socket as pysocket

    import zmq

    try:
        import psutil

        endpoint = socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        if not endpoint.startswith("tcp://"):
            return 0
        port = int(endpoint.rsplit(":", 1)[1])
        process = psutil.Process()
        listing = getattr(process, "net_connections", None) or process.connections
        fds = [c.fd for c in listing(kind="tcp") if c.laddr and c.laddr.port == port and c.raddr and c.fd >= 0]
    except Exception:
        return 0
    open_sockets = {}
    for fd in fds:
        try:
            inode = os.readlink(f"/proc/self/fd/{fd}")
            with pysocket.socket(fileno=os.dup(fd)) as peer:  # shutdown acts on the connection, not the descriptor
                peer.shutdown(pysocket.SHUT_WR)
            open_sockets[fd] = inode
        except OSError:
            continue
    # libzmq closes its descriptor once it has read the client's end-of-file
    deadline = time.monotonic() + timeout
    while open_sockets and time.monotonic() < deadline:
        time.sleep(0.001)
        for fd, inode in list(open_sockets.items()):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == inode:
                    continue
            except OSError:
                pass
            del open_sockets[fd]
    return len(fds)


def _b64(frame) -> str:
    import base64

    return base64.b64encode(bytes(frame)).decode("ascii")


def _write_startup_file(shell) -> Path | None:
    """A kernel relaunched by its manager uses the kernelspec's argv, so ``--ext`` cannot ride along: a startup
    file in the profile loads nb_cudaguard there. Every kernel of the profile runs it, so it acts (and deletes
    itself) only in the kernel that the handoff is bound to."""
    startup_dir = getattr(getattr(shell, "profile_dir", None), "startup_dir", None)
    if not startup_dir:
        return None
    path = Path(startup_dir) / _STARTUP_FILE
    path.write_text(
        "# Written by nb_cudaguard for the replay after one kernel restart; that kernel deletes it.\n"
        "try:\n"
        "    from nb_cudaguard.restart.resume import load_after_exit as _nb_cudaguard_load\n"
        f"    _nb_cudaguard_load(get_ipython(), {str(path)!r})\n"
        "    del _nb_cudaguard_load\n"
        "except ImportError:\n"
        "    pass\n",
        encoding="utf-8",
    )
    return path
