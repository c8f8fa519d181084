"""When a client is back on iopub after the exec: what the new process waits for before it answers the requests
kept during the restart, and before a reattached panel speaks. ipykernel internals used here: the iopub thread's
``_send_welcome_message`` (7), ``IPKernelApp.init_iopub`` (6), the thread's ``socket`` and ``io_loop``, and its
start time; part of ``kernel_internals``' list, kept apart for its size.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from nb_cudaguard.relaunch.kernel_internals import publish_status, tcp_peer_fds

# Clients retry their connection every 100 ms (libzmq's default), and a reply sent before a client is back is
# dropped by the ROUTER socket, its output by the PUB socket: after the replay, requests are answered once a client
# has subscribed to iopub again (see clients_are_back), or at the latest this long after the sockets were bound.
# The bound is paid in full only by a kernel whose clients do not read iopub (one that waits for its replies first
# subscribes only when it next reads iopub), or that no client reconnects to.
CLIENT_WAIT = 3.0
# How long a client's TCP connection to iopub must have stood before it counts as subscribed (see clients_are_back).
_SUBSCRIBE_GRACE = 0.3
_PEER_SINCE: dict[int, float] = {}


async def wait_for_clients(kernel, seconds: float | None = None) -> None:
    """Until a client is back on iopub, or at the latest ``seconds`` from now (by default ``CLIENT_WAIT`` after
    the sockets were bound)."""
    if seconds is None:
        deadline = time.monotonic() - seconds_since_bind(kernel) + CLIENT_WAIT
    else:
        deadline = time.monotonic() + seconds
    while not clients_are_back(kernel) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the shell socket reconnects alongside iopub


async def hold_until_subscribed(kernel) -> None:
    """After the kept requests are answered: the next request waits (at most ``CLIENT_WAIT``) until a client has
    subscribed again, since one that read its replies before its iopub subscribes only when it next reads iopub.
    Only where every subscription of this process is seen (``watch_subscriptions_from_start``); elsewhere there is no
    sign to wait for."""
    if _SUBSCRIPTIONS.watched_from_start:
        await wait_for_clients(kernel, seconds=CLIENT_WAIT)


class BusyUntilDone:
    """The kernel reads busy in the frontends from the click on a restart until the replay ends.

    The old process said "busy" after the restart's request was answered (``kernel_restart``); what the new one
    says first, ipykernel's "starting", is lost or read as not busy, and what it publishes before a client is back
    on iopub is dropped. So once a client is back (and the kernel has started: made on its event loop), the new
    process says "busy" again, unless the replay has ended: ``done`` says "idle". A lock orders the two, so that a
    late "busy" can never follow the "idle"."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self._lock = threading.Lock()
        self._done = False
        back = clients_back(kernel)
        threading.Thread(target=self._when_back, args=(back,), name="nb_cudaguard-busy", daemon=True).start()

    def _when_back(self, back: threading.Event) -> None:
        while not back.wait(0.05):
            with self._lock:
                if self._done:
                    return
        with self._lock:
            if not self._done:
                publish_status(self.kernel, "busy")

    def done(self) -> None:
        with self._lock:
            self._done = True
            publish_status(self.kernel, "idle")


def clients_are_back(kernel) -> bool:
    """Has a client subscribed to iopub again (so that what is published now reaches it)?

    A client's subscription is not its TCP connection: libzmq attaches a reconnected pipe to the client's SUB
    socket, and sends the subscription down it, only when the client's own thread next uses that socket. A
    client that waits for shell replies before it reads iopub is connected and not subscribed for as long as it
    waits, and everything published meanwhile is dropped.

    Watched from the process's start (``watch_subscriptions_from_start``, run by the config file the restart passes to
    the new process), a subscription is seen as it arrives: ipykernel 7's welcome message, or the subscription
    ipykernel 6's iopub socket, made an XPUB, hands up; that is the one proof. Watched only from the extension's
    load (a kernel started another way), the first welcome may have gone out before the watch; and ipykernel 6's
    PUB socket says nothing: there the one sign is a client's TCP connection to the iopub port that has stood for
    ``_SUBSCRIBE_GRACE``, never at once.
    """
    if _SUBSCRIPTIONS.watched_from_start:
        return _SUBSCRIPTIONS.seen.is_set()
    watch = _welcome_watch(kernel)
    if watch is not None and watch.clients_back.is_set():
        return True
    if watch is not None and not watch.peer_at_install:
        return False  # the welcome will come, and only it proves the subscription
    seen = _PEER_SINCE.get(id(kernel))
    if not _iopub_peer(kernel):
        _PEER_SINCE.pop(id(kernel), None)
        return False
    now = time.monotonic()
    if seen is None:
        _PEER_SINCE[id(kernel)] = now
        return False
    return now - seen >= _SUBSCRIBE_GRACE


def _iopub_peer(kernel) -> bool:
    """A client's TCP connection to the iopub port."""
    socket = getattr(getattr(kernel, "iopub_thread", None), "socket", None)
    return socket is not None and bool(tcp_peer_fds(socket))


def clients_back(kernel) -> threading.Event:
    """Set when a client subscribes to iopub again (ipykernel 7 then sends its welcome message): replies and output
    sent before that would be dropped. One wrapper per process, shared by every waiter."""
    if _SUBSCRIPTIONS.watched_from_start:
        return _SUBSCRIPTIONS.seen
    watch = _welcome_watch(kernel, install=True)
    return watch.clients_back if watch is not None else threading.Event()


class _FromStart:
    """Subscriptions to iopub since this process started (ipykernel 7's welcomes, or what ipykernel 6's socket
    handed up): the process-wide record that ``watch_subscriptions_from_start`` fills."""

    def __init__(self) -> None:
        self.watched_from_start = False
        self.seen = threading.Event()
        self.streams: list[Any] = []  # ipykernel 6: the reader of the XPUB's subscriptions, kept referenced


_SUBSCRIPTIONS = _FromStart()


def watch_subscriptions_from_start() -> None:
    """Watch every iopub subscription of this process, from before the kernel binds its sockets, so that none goes
    unseen. Run by ``relaunch/kernel_config.py``, which the in-place restart passes to the new process as an IPython
    config file: config files are read before ipykernel starts its iopub thread.

    ipykernel 7 sends a welcome message for each subscription: its sender is wrapped on its class. ipykernel 6's
    iopub is a PUB socket, which takes subscriptions in silence: there the socket it asks for is made an XPUB
    (``_XPubContext``), which publishes the same and also hands each new subscription up, and a reader on the iopub
    thread's own loop notes it. Without this a client on ipykernel 6 that read its replies before its iopub lost
    the output of the next request. Does nothing outside a kernel (a terminal IPython never imported ipykernel)."""
    iostream = sys.modules.get("ipykernel.iostream")
    thread_class: Any = getattr(iostream, "IOPubThread", None)
    app_class: Any = getattr(sys.modules.get("ipykernel.kernelapp"), "IPKernelApp", None)
    if thread_class is None or _SUBSCRIPTIONS.watched_from_start:
        return
    seen = _SUBSCRIPTIONS.seen
    send = getattr(thread_class, "_send_welcome_message", None)
    if send is not None:

        def send_and_note(self, subscription: str) -> object:
            seen.set()
            return send(self, subscription)

        thread_class._send_welcome_message = send_and_note
    elif app_class is not None and hasattr(app_class, "init_iopub"):
        init_iopub = app_class.init_iopub

        def init_iopub_on_xpub(self, context) -> None:
            init_iopub(self, _XPubContext(context))
            thread = self.iopub_thread
            thread.io_loop.add_callback(_note_subscriptions, thread.socket, thread.io_loop)

        app_class.init_iopub = init_iopub_on_xpub
    else:
        return
    _SUBSCRIPTIONS.watched_from_start = True


class _XPubContext:
    """The ZMQ context as ipykernel 6's ``init_iopub`` sees it: the PUB socket it asks for comes as an XPUB, which
    sends exactly as a PUB does; every other call goes to the real context."""

    def __init__(self, context) -> None:
        self._context = context

    def socket(self, kind: int, *args, **kwargs):
        import zmq

        return self._context.socket(zmq.XPUB if kind == zmq.PUB else kind, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._context, name)


def _note_subscriptions(socket, loop) -> None:
    """On the iopub thread (a ZMQ socket belongs to one thread): read what the XPUB hands up, a frame starting
    with 1 for each new subscription, 0 when the last subscriber of a topic leaves."""
    from zmq.eventloop.zmqstream import ZMQStream

    stream = ZMQStream(socket, loop)

    def on_frames(frames: list[bytes]) -> None:
        if frames and frames[0][:1] == b"\x01":
            _SUBSCRIPTIONS.seen.set()

    stream.on_recv(on_frames)
    _SUBSCRIPTIONS.streams.append(stream)


def _welcome_watch(kernel, install: bool = False) -> _WelcomeWatch | None:
    iopub = getattr(kernel, "iopub_thread", None)
    welcome = getattr(iopub, "_send_welcome_message", None)
    if iopub is None or welcome is None:
        return None
    if isinstance(welcome, _WelcomeWatch):
        return welcome
    if not install:
        return None
    watch = _WelcomeWatch(welcome, peer_at_install=_iopub_peer(kernel))
    iopub._send_welcome_message = watch
    return watch


class _WelcomeWatch:
    """iopub's welcome sender, wrapped on the instance: sets ``clients_back`` before each welcome is sent.
    ``peer_at_install``: a client was connected already, so its welcome may have gone out before the wrapper."""

    def __init__(self, send: Callable[[str], object], peer_at_install: bool) -> None:
        self.send = send
        self.peer_at_install = peer_at_install
        self.clients_back = threading.Event()

    def __call__(self, subscription: str) -> object:
        self.clients_back.set()
        return self.send(subscription)


def seconds_since_bind(kernel) -> float:
    """How long ago the sockets were bound: ipykernel starts its iopub thread right after binding, and Linux
    records each thread's start (in clock ticks since boot). 0 where that cannot be read."""
    thread = getattr(getattr(kernel, "iopub_thread", None), "thread", None)
    if thread is None:
        return 0.0
    try:
        with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as uptime:
            return max(0.0, float(uptime.read().split()[0]) - started)
    except (AttributeError, OSError, ValueError, IndexError):
        return 0.0
