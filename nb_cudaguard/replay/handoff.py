"""The handoff: what the old kernel process passes to the new one across the restart (plan, journal, options,
requests that arrived meanwhile).

An exec keeps the PID and the environment and nothing else, so the handoff is a file. The new process *runs* what
is in it (the plan's cells, the pending requests), so the file is treated like code:

* it lives in a private directory (mode 0700, owned by us, not a symlink) and is itself mode 0600, written to a
  temporary name and renamed into place, so that it is never seen half-written;
* it is bound to this kernel: its name comes from the kernel's connection file, its body names that file, and it
  carries an HMAC-SHA256 made with the connection file's key (the secret the kernel already shares with its
  frontends). Terminal IPython, or a kernel without a key, uses a per-process secret passed to the new image in
  the environment. A file that fails any check is refused with a message saying why, moved aside, and nothing in
  it runs;
* it is found by the kernel's identity, never by an environment the user can change (``%env TMPDIR=...``): a
  kernel's handoff sits beside its connection file, in a private directory of its own;
* it is valid only for the process it was written for (the same PID after an exec; after the exit fallback, a new
  process once the writer has ended), on the same boot, for ``MAX_AGE`` seconds;
* it is read once: the new process consumes (deletes) it, so a later start never replays it again, and a handoff
  that is refused is deleted too (with the values carried beside it), never moved aside or left behind; a side
  file beside it names its writer and the requests it keeps, for a handoff that cannot be parsed (``_write_kept``);
* its space can be reserved ahead (``reserve``): the in-place restart writes it only after it has closed its
  channels, when a failed write can no longer be called off (the kernel would have to exit, its kept requests
  unanswered). So the space is preallocated while the restart can still be called off, and the write then fills
  that space: a disk that fills in between cannot fail it. Preallocated, not merely checked: free space can be gone
  a moment later, and an allocated block cannot (except on copy-on-write file systems such as ZFS, which allocate
  anew on every write). The document itself cannot be written that early: the requests that arrive while the
  kernel stops reading, and the children it ends, belong in it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nb_cudaguard.errors import NbCudaguardError
from nb_cudaguard.replay import writer
from nb_cudaguard.replay.writer import MAX_AGE, boot_id

FORMAT = 2
KEPT = ".kept"  # the side file beside a handoff: its writer and the requests it keeps, unsigned (``_write_kept``)
ENV_PATH = "NB_CUDAGUARD_HANDOFF"
ENV_SECRET = "NB_CUDAGUARD_SECRET"
_MAX_BYTES = 512 * 1024 * 1024


class HandoffError(NbCudaguardError):
    """A handoff that was refused: nothing in it was executed.

    ``document`` is what the file held, unverified, when it could be parsed: the requests kept in it are signed
    one by one by their clients, so the new process can still answer those (with an error) without trusting it.
    """

    def __init__(self, message: str, document: dict | None = None) -> None:
        super().__init__(message)
        self.document = document


@dataclass(frozen=True)
class Binding:
    """Which process a handoff belongs to: a kernel (by connection file) or a terminal IPython (by PID)."""

    kind: str  # "kernel" | "terminal"
    ident: str  # the connection file's absolute path, or the PID
    key: bytes

    @property
    def slug(self) -> str:
        return hashlib.sha256(f"{self.kind}:{self.ident}".encode()).hexdigest()[:24]

    @property
    def description(self) -> str:
        return f"connection file {self.ident}" if self.kind == "kernel" else f"terminal IPython, PID {self.ident}"


def _process_secret(create: bool) -> bytes:
    """A secret that survives the exec (it is in the environment) and that no other kernel knows."""
    value = os.environ.get(ENV_SECRET)
    if value is None and create:
        value = secrets.token_hex(32)
        os.environ[ENV_SECRET] = value
    return value.encode() if value else b""


def binding_for(shell, create_secret: bool = False) -> Binding:
    """This process's binding: the kernel's connection file and key, or the terminal's PID and secret."""
    kernel = getattr(shell, "kernel", None)
    session = getattr(kernel, "session", None)
    if session is not None:
        from ipykernel.kernelapp import IPKernelApp

        if IPKernelApp.initialized():
            connection_file = os.path.abspath(IPKernelApp.instance().abs_connection_file)
            key = bytes(session.key or b"")
            return Binding("kernel", connection_file, key or _process_secret(create_secret))
    return Binding("terminal", str(os.getpid()), _process_secret(create_secret))


def private_dir(create: bool = True) -> Path:
    """``$XDG_RUNTIME_DIR/nb_cudaguard`` (or the temp dir's ``nb_cudaguard-<uid>``), created 0700 and checked."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.stat(runtime).st_uid == os.getuid():
        return private_under(Path(runtime) / "nb_cudaguard", create)
    return private_under(Path(tempfile.gettempdir()) / f"nb_cudaguard-{os.getuid()}", create)


def private_under(path: Path, create: bool = True) -> Path:
    """``path``, created 0700 if asked, once it is checked to be a directory of this user that no one else can
    enter (not a symlink that another user planted)."""
    if create:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise HandoffError(
            f"nb_cudaguard: {path} is not a private directory of this user (owner {info.st_uid}, "
            f"mode {oct(info.st_mode & 0o777)}); no handoff is written or read there."
        )
    return path


def handoff_dir(binding: Binding, create: bool = True) -> Path:
    """Where this process's handoff is: beside a kernel's connection file (the same for the old process, the exec'd
    one and a kernel its manager restarts, whatever the environment says), or for terminal IPython the user's
    private directory."""
    if binding.kind == "kernel":
        return private_under(Path(binding.ident).parent / f"nb_cudaguard-{os.getuid()}", create)
    return private_dir(create)


def path_for(binding: Binding, create: bool = True) -> Path:
    return handoff_dir(binding, create) / f"handoff-{binding.slug}.json"


def _mac(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Reservation:
    """Space set aside for a handoff written later, when its write must not fail for want of space (the in-place
    restart's write after its channels are closed): a temporary file beside the handoff, preallocated."""

    path: Path


def _document(binding: Binding, payload: dict) -> bytes:
    """The signed file's bytes."""
    if not binding.key:
        raise HandoffError("nb_cudaguard: no key to sign the handoff with; the restart was not started.")
    header = {"format": FORMAT, "kind": binding.kind, "ident": binding.ident, "written": time.time()}
    # an exec keeps the PID: that handoff is for this very process; the exit fallback's is for the next one
    header |= {"pid": os.getpid(), "boot": boot_id(), "same_process": payload.get("how") == "exec"}
    body = json.dumps({**header, "payload": payload}, sort_keys=True)
    return json.dumps({"mac": _mac(binding.key, body), "body": body}).encode()


def _temporary(target: Path) -> tuple[Path, int]:
    """A new private file beside ``target`` (its name says which process wrote it, for ``remove_stale``)."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return temporary, os.open(temporary, flags, 0o600)


def reserve(binding: Binding, payload: dict, more: int) -> Reservation:
    """Set aside the space of a handoff like ``payload`` plus ``more`` bytes, now, for a ``write`` that must not
    fail later. ``posix_fallocate`` (glibc writes the blocks where a file system cannot allocate them) or zeros
    where the platform has none; the file is closed at once, so that a file system that reports a full disk only
    when a file is closed (NFS) reports it here. Raises ``OSError`` naming the directory (a full or unwritable
    disk), or ``HandoffError``; nothing is left behind then."""
    size = len(_document(binding, payload)) + more
    target = path_for(binding)
    temporary, fd = _temporary(target)
    try:
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:
                os.write(fd, bytes(size))
        finally:
            os.close(fd)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(target.parent)) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return Reservation(temporary)


def write(binding: Binding, payload: dict, reserved: Reservation | None = None) -> Path:
    """Write atomically (temporary file, then rename) and return the path. With ``reserved``, the document goes
    into that space: a disk that filled since cannot fail it as long as it is no larger than the reservation."""
    document = _document(binding, payload)
    target = path_for(binding)
    _write_kept(target, payload)
    if reserved is None:
        temporary, fd = _temporary(target)
    else:
        temporary = reserved.path
        fd = os.open(temporary, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(document)  # no fsync: the exec keeps the page cache, and this runs in its critical path
            handle.truncate()  # the unused rest of a reservation
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        _kept_path(target).unlink(missing_ok=True)
        raise
    return target


def _kept_path(path: Path) -> Path:
    return path.with_name(path.name + KEPT)


def _write_kept(target: Path, payload: dict) -> None:
    """The side file, unsigned: the writer's mark (``writer.mark``) and the requests the handoff keeps (each signed
    by its own client). A handoff that cannot be parsed (cut short, overwritten) still says through it which requests
    wait for a reply, and a later start whose writer it was. Best effort, written before the handoff: the handoff's
    own write, into its reserved space, must not fail for it."""
    side = {"written": time.time(), **writer.mark(payload.get("how") == "exec"), "pending": payload.get("pending", [])}
    temporary = None
    try:
        temporary, fd = _temporary(_kept_path(target))
        with os.fdopen(fd, "wb") as handle:
            handle.write(json.dumps(side).encode())
        os.replace(temporary, _kept_path(target))
    except OSError:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def remove(path: Path) -> None:
    """Delete a handoff and its side file."""
    path.unlink(missing_ok=True)
    _kept_path(path).unlink(missing_ok=True)


def _read_kept(path: Path) -> dict | None:
    try:
        fd = os.open(_kept_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            data = json.loads(handle.read(_MAX_BYTES)) if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pending(binding: Binding) -> Path | None:
    """The handoff waiting for this process, if any (cheap: one ``stat``)."""
    try:
        path = path_for(binding, create=False)
    except (HandoffError, OSError):  # no directory yet (lstat fails), or one that is not private
        return None
    return path if os.path.lexists(path) else None


def _refuse(path: Path, reason: str, document: dict | None = None) -> HandoffError:
    remove(path)
    message = f"nb_cudaguard: refused the restart handoff {path}: {reason}; nothing in it was run, and it was removed."
    return HandoffError(message, document)


def _unverified(path: Path) -> dict | None:
    """What a refused handoff says, unverified, where it can be read at all: only its kept requests are ever used,
    and each of those is signed by its own client with the kernel's key (checked one by one before it is answered
    with an error, never run), so a refused file still gets every genuine request it holds a reply. A file that is
    no handoff's JSON at all (cut short, overwritten) has them in its side file, used when that says the handoff was
    for this process (those of a process that is gone are not answered here, as for a genuine handoff)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = json.loads(json.loads(handle.read(_MAX_BYTES))["body"])
    except (OSError, ValueError, KeyError, TypeError):
        data = None
    if isinstance(data, dict):
        return data
    kept = _read_kept(path)
    if kept is None or _not_for_this_process(kept) is not None:
        return None
    return {"payload": {"pending": kept.get("pending", [])}}


def _not_for_this_process(data: dict) -> str | None:
    """Why a genuine handoff of this kernel is still not for this process, or None."""
    age = time.time() - float(data.get("written", 0))
    if data.get("boot") != boot_id():
        return "it was written before the machine restarted"
    if not 0 <= age <= MAX_AGE:
        return f"it is {age:.0f} s old (a restart takes seconds; the process it was written for never came back)"
    pid = int(data.get("pid", -1))
    if data.get("same_process") and pid != os.getpid():
        return f"it was written for process {pid}, which was ended before it could restart"
    if not data.get("same_process") and writer.alive(pid) and pid != os.getpid():
        return f"the process that wrote it ({pid}) is still running"
    return None


def consume(binding: Binding, path: Path | None = None) -> dict:
    """Read, check and delete the handoff; return its payload. Raises ``HandoffError`` if it is refused."""
    path = path if path is not None else path_for(binding)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        document = _unverified(path)
        remove(path)
        raise HandoffError(
            f"nb_cudaguard: cannot open the restart handoff {path} ({exc}); nothing was run, and it was removed.",
            document,
        ) from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            mode = oct(info.st_mode & 0o777)
            reason = f"it is not a private file of this user (owner {info.st_uid}, mode {mode})"
            raise _refuse(path, reason, _unverified(path))
        if info.st_size > _MAX_BYTES:
            raise _refuse(path, f"it is too large ({info.st_size} bytes)")
        raw = handle.read()
    try:
        document = json.loads(raw)
        body, mac = document["body"], document["mac"]
    except (ValueError, KeyError, TypeError):
        raise _refuse(path, "it is not a handoff file (unreadable JSON)", _unverified(path))
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        data = None
    if not binding.key or not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(binding.key, str(body))):
        raise _refuse(path, "it was not written by this kernel, or it was changed after it was written", data)
    if data.get("kind") != binding.kind or data.get("ident") != binding.ident:
        where = f"{data.get('kind')} {data.get('ident')}"
        raise _refuse(path, f"it belongs to {where}, not to this {binding.description}", data)
    if data.get("format") != FORMAT:
        raise _refuse(path, f"it has format {data.get('format')}, this version reads format {FORMAT}", data)
    stale = _not_for_this_process(data)
    if stale is not None:
        raise _refuse(path, stale)  # its requests were sent to a process that is gone: none is answered here
    remove(path)
    return data["payload"]


def remove_stale(directory: Path, own: Binding) -> list[str]:
    """Delete what dead kernels left in ``directory`` (one of our own private directories): handoffs and their side
    files that no process can take any more (``writer.left_behind``: at once where the writer was to be exec'd and
    has ended; after ``MAX_AGE`` where the next process was to take it), judged by the side file's mark or the body's
    (the signature is not checked: they are only deleted, never read further), and temporary files (half-written,
    or space reserved for a handoff) of ended processes, at once: only their writer could have finished them.
    The handoff of this process's ``own`` kernel is left to ``consume``, which says why it refuses it. Returns one
    note per file removed."""
    notes = []
    for path in directory.glob("*handoff-*.json*"):
        try:
            if path.is_symlink() or not path.is_file() or path.name.startswith(f"handoff-{own.slug}."):
                continue
            if path.name.startswith("."):
                if writer.alive(int(path.name.rsplit(".", 2)[-2])):
                    continue
                path.unlink()
            else:
                handoff = path.with_name(path.name.removesuffix(KEPT))
                if path.name.endswith(KEPT) and handoff.exists():
                    continue  # judged with its handoff
                mark = _read_kept(handoff) or _unverified_mark(handoff)
                age = time.time() - path.stat().st_mtime
                if not (writer.left_behind(mark, age) if mark else age >= MAX_AGE):
                    continue
                remove(handoff)
            notes.append(f"nb_cudaguard: removed {path.name}, left by a kernel that ended during a restart.")
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
    return notes


def _unverified_mark(path: Path) -> dict | None:
    """The writer's mark in a handoff's body (one without its side file); None where it cannot be parsed."""
    try:
        body = json.loads(json.loads(path.read_text())["body"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {key: body.get(key) for key in ("pid", "boot", "same_process")} if isinstance(body, dict) else None
