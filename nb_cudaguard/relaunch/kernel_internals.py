"""Every ipykernel internal that nb_cudaguard touches, for ipykernel 6 and 7, in one place.

The in-place restart has to keep requests that arrive while the process execs, answer them in the new process,
publish into a display that the old process opened, know when a client has subscribed again and give fds 1 and 2
their files back. ipykernel has no public API for any of this, so each private attribute we rely on is named here,
with the versions it differs in; a new ipykernel release is checked against this module alone.

- ipykernel 7 (``shell_main``, ``_main_asyncio_lock``, a shell channel thread, ``dispatch_shell`` looked up on the
  instance for every request, the iopub thread's ``_send_welcome_message``);
- ipykernel 6 (``msg_queue`` of ``(index, dispatch, args)`` looked up on each use, ``schedule_dispatch``, a PUB
  iopub socket with no welcome message);
- ipykernel 7's subshells are in ``relaunch.subshells``, and when a client is back on iopub (the welcome message,
  the iopub thread's start) in ``relaunch.iopub_clients``, each kept apart for its size;
- both: ``OutStream``'s fd watcher (``_should_watch``, ``watch_fd_thread``, ``_fid``, ``_original_stdstream_fd``,
  ``_original_stdstream_copy``), ``session``, ``iopub_socket``, ``_topic``, ``get_parent``/``_parent_header``,
  ``do_shutdown`` wrapped on the instance (``on_shutdown_request``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable

from nb_cudaguard.record.capture import pending_bytes

CLOSE_TIMEOUT = 3.0
_DRAIN_SECONDS = 1.0


# --- the request being answered
def parent_header(kernel) -> dict:
    """The header of the shell request the kernel is answering, JSON-safe (its date is a datetime)."""
    getter = getattr(kernel, "get_parent", None)
    if getter is None:
        parent = kernel._parent_header
    else:
        try:
            parent = getter("shell")
        except TypeError:  # ipykernel 6: get_parent() takes no channel
            parent = getter()
    header = parent.get("header", {}) if isinstance(parent, dict) else {}
    return json.loads(json.dumps(header, default=str))


def main_lock(kernel) -> asyncio.Lock | None:
    """ipykernel 7's lock, held by a shell request until its reply and idle are sent; None on ipykernel 6."""
    return getattr(kernel, "_main_asyncio_lock", None)


# --- shell requests kept across the restart
def keep_requests(kernel, keep: Callable[[list], None]) -> KeptQueue | None:
    """From now on every shell request goes to ``keep`` (raw, still signed) instead of being run.

    ipykernel 7 looks ``dispatch_shell`` up on the instance for every request, so it is replaced there (a single
    frame is its internal "stop aborting" marker, or our end marker: passed on as it is). ipykernel 6 binds
    ``dispatch_shell`` at start but puts every shell request in ``kernel.msg_queue``, looked up on each use, so that
    queue is stood in for (returned, to wait on and release).
    """
    if hasattr(kernel, "shell_main"):

        async def keep_raw(msg, /, subshell_id=None, *, concurrent=False):
            keep(msg)

        kernel.dispatch_shell = keep_raw
        return None
    queue = KeptQueue(kernel.msg_queue, keep)
    kernel.msg_queue = queue
    return queue


def release_requests(kernel, queue: KeptQueue | None) -> None:
    kernel.__dict__.pop("dispatch_shell", None)
    if queue is not None:
        kernel.msg_queue = queue.original
        queue.released.set()


async def dispatch_raw(kernel, frames: list[bytes], *, unpatched: bool = False) -> None:
    """Run one raw shell request as if it had just arrived, replying to its own client."""
    import zmq

    dispatch = type(kernel).dispatch_shell if unpatched else kernel.dispatch_shell
    message = [zmq.Frame(frame) for frame in frames]
    await (dispatch(kernel, message) if unpatched else dispatch(message))


def shell_socket_stream(kernel):
    """The zmq stream that reads the shell socket, and ipykernel 7's shell channel thread (None on 6)."""
    thread = getattr(kernel, "shell_channel_thread", None)
    return thread, getattr(thread, "shell_stream", None) or kernel.shell_stream


def send_behind_forwarded_requests(thread, stream, marker: bytes) -> None:
    """ipykernel 7: stop the shell channel thread's reader, then send ``marker`` down the inproc socket the thread
    forwards requests through, behind any forward still under way (both first-in first-out)."""
    to_main = thread.manager.get_shell_channel_to_subshell_socket(None)  # used by that thread only

    async def end_of_requests() -> None:
        async with thread.asyncio_lock:
            to_main.send_multipart([marker])

    def stop_reading() -> None:
        stream.stop_on_recv()
        thread.io_loop.add_callback(end_of_requests)

    thread.io_loop.add_callback(stop_reading)


def stop_iopub(kernel, grace: float) -> None:
    """Let the iopub thread send what is queued (the restart request's idle, the last output), then stop it."""
    thread = getattr(kernel, "iopub_thread", None)
    if thread is not None:
        thread.stop()
        time.sleep(grace)  # libzmq's own I/O thread puts the last messages on the wire


def run_first(kernel, coroutine: Callable[[], Awaitable[None]]) -> asyncio.Future | None:
    """Run ``coroutine`` ahead of every request. ipykernel 7 runs requests under its main lock, which the coroutine
    takes first; ipykernel 6 runs them one at a time from its message queue, where it goes first. Returns the task
    to keep a reference to, where there is one."""
    if main_lock(kernel) is None and hasattr(kernel, "schedule_dispatch"):
        kernel.schedule_dispatch(coroutine)
        return None
    return asyncio.ensure_future(coroutine())


def publish_update(kernel, display_id: str, text: str, parent_header: dict) -> None:
    """Update a display that the old process opened (its id and its request's header crossed the restart)."""
    content = {"data": {"text/plain": text}, "metadata": {}, "transient": {"display_id": display_id}}
    topic = kernel._topic("update_display_data") if hasattr(kernel, "_topic") else None
    kernel.session.send(kernel.iopub_socket, "update_display_data", content, {"header": parent_header}, ident=topic)


# --- the kernel going away for good
def on_shutdown_request(kernel, before: Callable[[bool], None]) -> Callable[[], None]:
    """Call ``before(restart)`` when a client asks the kernel to shut down or to restart (a ``shutdown_request``:
    a frontend's Restart or Shut down, jupyter_client's ``shutdown_kernel``), before ipykernel replies and
    broadcasts its reply on iopub, so that what ``before`` publishes reaches the clients first. Returns the undo.

    ``do_shutdown`` is the method kernels override for this; ``shutdown_request`` looks it up on the instance for
    each request in ipykernel 6 and 7 (on the control thread; ipykernel 6's is sync, 7's base is async and
    IPythonKernel's sync), so it is wrapped there and its result passed on as it is. An in-place restart never
    sends one: it execs from inside a request.
    """
    own = kernel.__dict__.get("do_shutdown")
    original = kernel.do_shutdown

    def do_shutdown(restart):
        try:
            before(bool(restart))
        except Exception as exc:  # the shutdown matters more
            kernel.log.warning("nb_cudaguard: before the shutdown (%s: %s)", type(exc).__name__, exc)
        return original(restart)

    kernel.do_shutdown = do_shutdown

    def undo() -> None:
        if kernel.__dict__.get("do_shutdown") is not do_shutdown:  # wrapped again since: left to its wrapper
            return
        if own is None:
            del kernel.do_shutdown
        else:
            kernel.do_shutdown = own

    return undo


# --- TCP peers of a socket
def tcp_peer_fds(socket) -> list[int]:
    """The fds of the TCP connections to the port ``socket`` is bound to (empty where not TCP or not listable)."""
    try:
        import psutil
        import zmq

        endpoint = socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        if not endpoint.startswith("tcp://"):
            return []
        port = int(endpoint.rsplit(":", 1)[1])
        process = psutil.Process()
        listing = getattr(process, "net_connections", None) or process.connections
        return [c.fd for c in listing(kind="tcp") if c.laddr and c.laddr.port == port and c.raddr]
    except Exception:
        return []


class KeptQueue:
    """Stands in for ipykernel 6's shell message queue during a restart: what is put in is kept, raw and still
    signed, and the one coroutine that takes requests out waits here until the restart is given up (if ever)."""

    def __init__(self, original, keep: Callable[[list], None]) -> None:
        from tornado.queues import QueueEmpty

        self.original = original
        self.keep = keep
        self.answered = asyncio.Event()  # the dispatcher asked for more: the restart request has been answered
        self.released = asyncio.Event()
        while True:
            try:
                self.put_nowait(original.get_nowait())
            except QueueEmpty:
                break

    def put_nowait(self, item) -> None:
        _index, _dispatch, args = item
        self.keep(args[0])

    def qsize(self) -> int:
        return 0

    def get_nowait(self):
        from tornado.queues import QueueEmpty

        raise QueueEmpty

    async def get(self):
        self.answered.set()
        await self.released.wait()
        return await self.original.get()


def raw_frames(msg) -> list[bytes]:
    return [bytes(getattr(frame, "bytes", frame)) for frame in msg]


def drain(socket) -> list[list[bytes]]:
    import zmq

    kept = []
    while True:
        try:
            kept.append(socket.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            return kept
        except zmq.ZMQError:
            return kept


def let_clients_go(socket, timeout: float = CLOSE_TIMEOUT) -> int:
    """Half-close every TCP connection of the shell socket and wait until each client has closed its side.

    A request a client writes after the last read of the socket and before the exec would otherwise be lost: its
    client has handed it to TCP, and the exec resets the connection with it. After ``shutdown(SHUT_WR)`` the client's
    libzmq reads end-of-file, drops the connection and queues what it sends next for its reconnect (to the new
    process); libzmq here still reads the connection up to the client's own FIN, which TCP puts behind everything
    the client wrote, so every request sent before that is in the socket's queue when this returns. Returns how many
    connections were closed; 0 where the transport is not TCP or the connections cannot be listed.
    """
    import socket as pysocket

    fds = [fd for fd in tcp_peer_fds(socket) if fd >= 0]
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


# --- fds 1 and 2
def restore_std_fds() -> None:
    """Put the original files back on fds 1 and 2 (ipykernel points them at its capture pipes)."""
    for number, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name, None)
        if stream is None:
            continue
        if getattr(stream, "_should_watch", False) and getattr(stream, "watch_fd_thread", None) is not None:
            stream.flush()
            _stop_pipe_watch(stream, getattr(stream, "_original_stdstream_fd", number))
        elif getattr(stream, "_original_stdstream_copy", None) is not None:
            os.dup2(stream._original_stdstream_copy, stream._original_stdstream_fd)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def _stop_pipe_watch(stream, fd: int) -> None:
    """Stop ipykernel's pipe reader once it has read what is in the pipe, then give ``fd`` its file back.

    ``OutStream.close`` cannot be used for this everywhere: in ipykernel 6 it joins a reader thread that sleeps in
    ``read`` with nothing left to wake it (the process hangs), and it never restores the fd. The reader checks its
    flag only after each read, so once the pipe is empty the flag is cleared and one byte wakes it; that byte is
    not forwarded. What it had already read it still forwards before it exits.
    """
    deadline = time.monotonic() + _DRAIN_SECONDS
    while pending_bytes(stream._fid) and time.monotonic() < deadline:
        time.sleep(0.001)
    stream._should_watch = False
    if _same_pipe(fd, stream._fid):  # a cell that pointed fd at a file keeps that file free of our wake byte;
        try:  # the reader then sees end-of-file instead and stops by itself
            os.write(fd, b"\0")
        except OSError:
            pass
    stream.watch_fd_thread.join(timeout=_DRAIN_SECONDS)
    os.dup2(stream._original_stdstream_copy, fd)


def _same_pipe(write_fd: int, read_fd: int) -> bool:
    """Is ``write_fd`` still the write end of the pipe ``read_fd`` reads (both ends of a pipe share one inode)?"""
    try:
        written, read = os.fstat(write_fd), os.fstat(read_fd)
    except OSError:
        return False
    return (written.st_dev, written.st_ino) == (read.st_dev, read.st_ino)


# --- the kernel's status
def publish_status(kernel, state: str) -> None:
    """A ``status`` message with no parent, as ipykernel's own ``starting``: frontends take the kernel's state
    from the latest one, and after an in-place restart the last they saw was ``starting`` (the replay runs outside
    any request, so nothing else says ``idle``)."""
    topic = kernel._topic("status") if hasattr(kernel, "_topic") else None
    kernel.session.send(kernel.iopub_socket, "status", {"execution_state": state}, parent={}, ident=topic)
