"""One in-place restart of an ipykernel kernel, from the cell that asks for it to the exec.

The steps and why each is there are in ``relaunch.restart``'s docstring; every ipykernel internal used here is in
``relaunch.kernel_internals``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path

from nb_cudaguard.relaunch import kernel_internals as internals
from nb_cudaguard.relaunch import reexec, subshells
from nb_cudaguard.relaunch.handoff_content import Handoff, RestartOptions
from nb_cudaguard.relaunch.preparation import (
    LATE_BYTES,
    announce,
    discard_written,
    handoff_for,
    mark_restart_cell,
    write_startup_file,
)
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import ReplayPlan

_SETTLE_SECONDS = 0.01
_SETTLE_LIMIT = 0.5
_IOPUB_GRACE = 0.01
# Sent by the stopping shell channel thread behind the last request it forwarded (see _stop_shell_channel_thread).
_END_OF_REQUESTS = b"nb_cudaguard: end of requests"


class KernelRestart:
    def __init__(self, guard: CudaGuardState, plan: ReplayPlan, options: RestartOptions) -> None:
        self.shell = guard.shell
        self.guard = guard
        self.kernel = guard.shell.kernel
        self.plan = plan
        self.options = options
        self.requested_at = time.time()  # the click, or the cell: the wait the panel's heading counts starts here
        self.pending: list[list[bytes]] = []
        self.record = guard.current_cell
        self.journal_json: str | None = None
        self.children: list[str] = []
        self._queue: internals.KeptQueue | None = None
        self._reserved: handoff.Reservation | None = None
        self._end_reached = asyncio.Event()
        self.binding = handoff.binding_for(self.shell, create_secret=True)
        self.parent: dict = {}
        self.display_id = ""
        # ipykernel 7: the subshells clients opened (a widget frontend does), recreated with the same ids after the
        # exec; read now, since stopping the shell channel thread closes them
        self.subshells = subshells.subshell_ids(self.kernel)

    # --- in the cell
    def arm(self) -> None:
        from IPython.display import display

        self.parent = internals.parent_header(self.kernel)
        self.display_id = f"nb_cudaguard-restart-{os.getpid()}-{time.monotonic_ns()}"
        display({"text/plain": announce(self.plan, "the kernel")}, raw=True, display_id=self.display_id)
        self.guard.restarting = True
        self._queue = internals.keep_requests(self.kernel, self._keep)
        self.kernel.io_loop.add_callback(self._finish)

    def _keep(self, msg: list) -> None:
        """A shell request arrived: kept, never deserialised, and no ``busy``/``idle`` goes out for it (an early
        ``idle`` would make a frontend stop listening for the request's output)."""
        if len(msg) > 1:
            self.pending.append(internals.raw_frames(msg))
        elif bytes(getattr(msg[0], "bytes", msg[0])) == _END_OF_REQUESTS:
            self._end_reached.set()

    # --- on the event loop, after the reply
    async def _finish(self) -> None:
        stage = "preparing"
        try:
            await self._after_restart_request()
            # the request that asked for the restart said "idle": the kernel is busy until the new process's replay
            # ends (it says "idle" then, resume.Replay), and the frontends show it so meanwhile
            internals.publish_status(self.kernel, "busy")
            mark_restart_cell(self.record)
            self.journal_json = self.guard.journal.to_json()  # once: the last write sits right before the exec
            # The handoff is written once everything is closed; its space is taken now, so that a disk that is full
            # (or unwritable) calls the restart off here, before anything is closed, and one that fills meanwhile
            # cannot stop the write after the point of no return.
            self._reserved = handoff.reserve(self.binding, self._content([]).to_document(), LATE_BYTES)
            stage = "stopping"
            socket = await self._stop_reading_requests()
            self.children = reexec.end_children()
            self.guard.unregister()
            internals.restore_std_fds()
            internals.stop_iopub(self.kernel, _IOPUB_GRACE)
            # The shell socket stays open to the last moment and is read once more just before the exec: a
            # request that reaches it unread is lost with it, while one sent after the exec waits in its client's
            # queue until the new process binds the same port. The clients are first told to go (see
            # let_clients_go), so that no request can still be on its way when that last read happens.
            internals.let_clients_go(socket)
            self.pending += internals.drain(socket)
            path = self._write(self.children)
            os.environ[handoff.ENV_PATH] = str(path)
            stage = "exec"
            if self.options.method == "exit":
                raise OSError("the exit path was asked for")
            reexec.mark_fds_cloexec()
            reexec.exec_self(reexec.exec_argv())
        except BaseException as exc:
            if stage == "preparing":
                await self._abort(exc)
            else:
                self._exit_for_autorestart(exc, stage)

    async def _after_restart_request(self) -> None:
        lock = internals.main_lock(self.kernel)
        if lock is not None:
            async with lock:  # held by the restart request until its reply and idle are sent
                pass
        elif self._queue is not None:
            try:  # ipykernel 6 asks its queue for the next request once the restart request is answered
                await asyncio.wait_for(self._queue.answered.wait(), internals.CLOSE_TIMEOUT)
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
        thread, stream = internals.shell_socket_stream(self.kernel)
        if thread is not None:
            await self._stop_shell_channel_thread(thread, stream)
        else:
            stream.stop_on_recv()  # ipykernel 6 queues each request as it reads it: none is in flight after this
        self.pending += internals.drain(stream.socket)
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
        internals.send_behind_forwarded_requests(thread, stream, _END_OF_REQUESTS)
        try:
            await asyncio.wait_for(self._end_reached.wait(), internals.CLOSE_TIMEOUT)
        except asyncio.TimeoutError:  # the thread is stuck: keep what has come, as well as a wait can tell
            kernel_log = getattr(self.kernel, "log", None)
            if kernel_log is not None:
                kernel_log.warning("nb_cudaguard: the shell channel thread did not confirm its last request.")
            await self._settle()
        thread.stop()
        thread.join(timeout=internals.CLOSE_TIMEOUT)

    def _write(self, children: list[str]) -> Path:
        reserved, self._reserved = self._reserved, None  # the reserved space is written once, or given back
        return handoff.write(self.binding, self._content(children).to_document(), reserved)

    def _content(self, children: list[str]) -> Handoff:
        return handoff_for(
            self.guard,
            self.plan,
            self.options,
            how=self.options.method,
            children_ended=tuple(children),
            journal=self.journal_json,
            pending=tuple(tuple(frames) for frames in self.pending),
            parent_header=self.parent,
            display_id=self.display_id,
            subshells=self.subshells,
            requested_at=self.requested_at,
        )

    async def _abort(self, exc: BaseException) -> None:
        """Nothing is closed yet: run the kept requests here after all, in order, and carry on in this process."""
        from nb_cudaguard.relaunch.resume import show_at_next_cell

        self.guard.restarting = False
        failure = (
            f"nb_cudaguard: the restart did not start ({type(exc).__name__}: {exc}); this kernel goes on as it was."
        )
        self.guard.restart_failure = failure
        self.kernel.log.error(failure)
        # the restart cell's line said "restarting": it says why not instead (nothing is closed, iopub included)
        internals.publish_update(self.kernel, self.display_id, failure, self.parent)
        show_at_next_cell(self.shell, lambda: self.guard.restart_failure)
        while self.pending:  # not through the capture, which still keeps whatever arrives meanwhile
            await internals.dispatch_raw(self.kernel, self.pending.pop(0), unpatched=True)
        internals.release_requests(self.kernel, self._queue)
        internals.publish_status(self.kernel, "idle")  # said "busy" once the restart's request was answered
        discard_written(self.binding)  # last: whatever it meets, the cell has said why and the requests have run

    def _hand_over_written(self) -> None:
        """What was written for this process after its exec is now for the kernel's next process: marked so, a later
        start of the extension elsewhere keeps it while that process may still come (``carry.files.mark_owner``)."""
        from nb_cudaguard.carry.files import mark_owner

        for manifest in (self.options.carry, self.options.snapshot):
            if manifest is not None:
                mark_owner(Path(manifest.directory), same_process=False)

    def _exit_for_autorestart(self, exc: BaseException, stage: str) -> None:
        """The exec did not happen: exit, and let the kernel manager's auto-restart bring the kernel back. The
        handoff is written again for that path unless it already was (``method="exit"``): a disk that filled since
        the reservation would fail that write."""
        written_for_exit = stage == "exec" and self.options.method == "exit"
        self.options = dataclasses.replace(self.options, method="exit")
        try:
            if not written_for_exit:
                self._write(self.children)
            write_startup_file(self.shell, self.binding.slug)
            self._hand_over_written()
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
