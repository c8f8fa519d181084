"""Tee what a cell writes to the process's stdout and stderr into a small buffer, without taking it from the user.

CUDA prints ``... Assertion `t >= 0 && t < n_classes` failed.`` from C, at the next synchronisation, to the
process's file descriptors: in a notebook that text often lands in the server log where nobody looks. We keep a
bounded tail of each cell's output and the assertion lines in it, so that the report can show them.

Two ways in, chosen per stream when the extension loads:

* ``stream``: ipykernel (>= 6, ``capture_fd_output`` on) already points fds 1 and 2 at pipes and forwards them to
  the frontend from a thread that calls ``OutStream.write``. We wrap that one method on the instance: every byte
  the user sees passes through it exactly once, in order, so nothing can be stolen or reordered.
* ``fd``: everywhere else (terminal IPython, ``capture_fd_output`` off) we do what ipykernel does, for the length
  of a cell only: point the fd at a pipe and let a thread copy each chunk to the original fd and to the buffer.
  Outside cells the fds are the user's own, so a terminal's prompt keeps its tty.

A cell that closes or re-points fd 1 or 2 wins: we notice, stop tapping that fd, and say so in ``status``.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import sys
import termios
import threading
import time
from collections.abc import Callable

from nb_cudaguard.record.fold import Fold
from nb_cudaguard.record.output import CellOutput

_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20
_DRAIN_SECONDS = 0.5


def _fflush_c() -> None:
    """Push C stdio buffers (CUDA prints through printf) into the fds before we read or restore them."""
    if _libc is None:
        return
    try:
        _libc.fflush(None)
    except (AttributeError, OSError):
        pass


_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None)
except OSError:  # pragma: no cover - every Linux and macOS libc loads
    _libc = None


def pending_bytes(fd: int) -> int:
    """Bytes waiting to be read in the pipe or socket ``fd`` (0 where that cannot be asked)."""
    buf = ctypes.c_int(0)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf)
    except OSError:
        return 0
    return buf.value


class _StreamTap:
    """Wraps ``write`` on one ipykernel OutStream instance (which its fd-watch thread also calls)."""

    mode = "stream"

    def __init__(self, stream, fd: int, sink, fold: Fold) -> None:
        self.stream = stream
        self.fd = fd
        self.sink = sink
        self.fold = fold
        self.disabled_reason: str | None = None
        self.begin()

    def begin(self) -> None:
        self.fold.begin()
        # IPython 9 swaps ``write`` for its own history tee around every cell and puts back what it found, so
        # we check at each cell that ours is the outermost one, rather than installing it once.
        current = self.stream.write
        if getattr(current, "__nb_cudaguard__", False):
            return
        self.stream.write = _TeeWrite(current, self.sink, self.stream, self.fold)

    def end(self, failed: bool) -> None:
        self.disabled_reason = self._redirected()
        if failed:
            self._drain()
        rest = self.fold.end()
        current = self.stream.__dict__.get("write")
        if rest and isinstance(current, _TeeWrite):
            current.inner(rest)

    def _drain(self) -> None:
        _fflush_c()
        fid = getattr(self.stream, "_fid", None)
        if fid is None:
            return
        deadline = time.monotonic() + _DRAIN_SECONDS
        while pending_bytes(fid) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.01)  # let the watcher finish the chunk it already read

    def _redirected(self) -> str | None:
        """Why C-level output to the fd no longer reaches the tap: a cell pointed the fd away from the pipe that
        ipykernel reads (both ends of a pipe share one inode). Asked at every cell's end, so a cell that puts the
        fd back is captured again."""
        fid = getattr(self.stream, "_fid", None)
        try:
            if fid is None or os.fstat(self.fd).st_ino == os.fstat(fid).st_ino:
                return None
        except OSError:
            pass  # the fd was closed
        return f"a cell closed or redirected fd {self.fd}; C-level output to it is not captured until it is put back"

    def close(self) -> None:
        current = self.stream.__dict__.get("write")
        if current is not None and getattr(current, "__nb_cudaguard__", False):
            del self.stream.write


class _TeeWrite:
    """An OutStream's ``write``, then the sink for text. What C wrote (the stream's fd-watch thread calls this)
    reaches the frontend through ``fold``. ``__nb_cudaguard__`` marks it as ours (to find it again, not to wrap it
    twice)."""

    __nb_cudaguard__ = True

    def __init__(self, inner: Callable[..., object], sink: Callable[[str], None], stream: object, fold: Fold) -> None:
        self.inner = inner
        self.sink = sink
        self.stream = stream
        self.fold = fold

    def __call__(self, text: object, *args: object, **kwargs: object) -> object:
        if not isinstance(text, str):
            return self.inner(text, *args, **kwargs)
        shown = text
        if threading.current_thread() is getattr(self.stream, "watch_fd_thread", None):
            shown = self.fold.pass_on(text)
        result = self.inner(shown, *args, **kwargs) if shown or not text else None
        self.sink(text)
        return result if shown is text else len(text)  # what was written, folded or not


class _FdTap:
    """Points one fd at a pipe during a cell; a thread copies each chunk to the original and to the sink."""

    mode = "fd"

    def __init__(self, fd: int, pystream_name: str, sink) -> None:
        self.fd = fd
        self.pystream_name = pystream_name
        self.sink = sink
        self.disabled_reason: str | None = None
        self.saved = os.dup(fd)
        os.set_inheritable(self.saved, False)
        self.read_end, self.write_end = os.pipe()
        try:
            fcntl.fcntl(self.write_end, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass
        os.set_blocking(self.read_end, False)
        self._pipe_ino = os.fstat(self.write_end).st_ino
        self._lock = threading.Lock()
        self._active = False
        self._thread = threading.Thread(target=self._pump, name=f"nb_cudaguard-fd{fd}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        # Wait for data without the lock, then read *and* forward under it: once the pipe is empty and the lock is
        # free, every byte the cell wrote has reached the original fd and the buffer (see ``end``).
        poller = select.poll()
        poller.register(self.read_end, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                try:
                    data = os.read(self.read_end, _PIPE_BYTES)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                view = memoryview(data)
                while view:
                    try:
                        written = os.write(self.saved, view)
                    except OSError:
                        break
                    view = view[written:]
                self.sink(data)

    def _flush_python(self) -> None:
        stream = getattr(sys, self.pystream_name, None)
        if stream is None:
            return
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass

    def begin(self) -> None:
        if self.disabled_reason:
            return
        self._flush_python()
        os.dup2(self.write_end, self.fd)
        self._active = True

    def _still_ours(self) -> bool:
        try:
            return os.fstat(self.fd).st_ino == self._pipe_ino
        except OSError:
            return False

    def end(self, failed: bool) -> None:
        if not self._active:
            return
        self._active = False
        self._flush_python()
        if failed:  # only then do we need what C still buffers; on success it reaches the user later anyway
            _fflush_c()
        if self._still_ours():
            os.dup2(self.saved, self.fd)
        else:
            self.disabled_reason = f"the cell closed or redirected fd {self.fd}; its output is no longer captured"
        deadline = time.monotonic() + _DRAIN_SECONDS
        while pending_bytes(self.read_end) and time.monotonic() < deadline:
            time.sleep(0.001)
        with self._lock:
            pass

    def close(self) -> None:
        if self._active:
            self.end(failed=False)
        os.close(self.write_end)  # the pump sees EOF once the pipe is drained
        self._thread.join(timeout=2)
        os.close(self.read_end)
        os.close(self.saved)


def _is_watching_outstream(stream) -> bool:
    return getattr(stream, "_fid", None) is not None and hasattr(stream, "_original_stdstream_copy")


class OutputCapture:
    """One per shell: the taps on fds 1 and 2 and the current cell's output."""

    def __init__(self, limit: int = 64 * 1024, keep_assertion_lines: int = 3) -> None:
        self.limit = limit
        self.keep_assertion_lines = keep_assertion_lines  # per cell and stream, in the notebook (``fold``)
        self.current = CellOutput(limit=limit)
        self._taps: list = []

    def attach(self) -> None:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            stream = getattr(sys, name, None)
            if _is_watching_outstream(stream):
                self._taps.append(_StreamTap(stream, fd, self._sink, Fold(self.keep_assertion_lines)))
            else:
                try:
                    self._taps.append(_FdTap(fd, name, self._sink))
                except OSError as exc:  # fd closed before we loaded: nothing to tap
                    if sys.__stderr__ is not None:
                        sys.__stderr__.write(f"nb_cudaguard: not capturing fd {fd}: {exc}\n")

    def _sink(self, text: str) -> None:
        self.current.add(text)

    @property
    def modes(self) -> dict[int, str]:
        return {tap.fd: tap.mode for tap in self._taps}

    @property
    def problems(self) -> list[str]:
        return [tap.disabled_reason for tap in self._taps if tap.disabled_reason]

    def status(self) -> str:
        """Each fd's route, and what stopped a tap (``%cudaguard status``)."""
        modes = ", ".join(f"fd {fd}: {mode}" for fd, mode in sorted(self.modes.items()))
        problems = "; ".join(self.problems)
        return modes + (f" ({problems})" if problems else "")

    def keep_assertions(self, lines: int) -> None:
        """Show ``lines`` device assertion lines per cell and stream in the notebook (0: all of them)."""
        self.keep_assertion_lines = lines
        for tap in self._taps:
            if isinstance(tap, _StreamTap):
                tap.fold.keep = lines

    def begin_cell(self) -> None:
        self.current = CellOutput(limit=self.limit)
        for tap in self._taps:
            tap.begin()

    def end_cell(self, failed: bool) -> CellOutput:
        for tap in self._taps:
            tap.end(failed)
        self.current.finish()
        return self.current

    def detach(self) -> None:
        for tap in self._taps:
            tap.close()
        self._taps.clear()
