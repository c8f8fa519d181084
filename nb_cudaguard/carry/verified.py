"""Carried files read back in the new process, only as the signed handoff names them, and safe from change after.

A pickle stream is read whole and hashed. A buffer file is mapped copy-on-write instead (no read, no copy: its
arrays stay on the mapped pages), and a private mapping of Linux still shows what another process writes into a
page this process has not written yet. So before the mapping is hashed, the file is unlinked (no new opener can find
it) and a write lease is taken and given back at once: the kernel grants it only while no other file description of
the file is open anywhere, so once it is granted, nobody can change the pages after the hash. Where leases are not
available (another file system, another OS), the buffers are copied into this process instead.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
from pathlib import Path

from nb_cudaguard.carry.value import NotCarriable


def _open_private(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


def read_verified(path: Path, sha256: str) -> bytes:
    """The bytes of a carried pickle stream, only if they are those the (signed) handoff names. Reading and hashing
    release the GIL, so this can run beside the replay; unpickling is left to the caller."""
    with os.fdopen(_open_private(path), "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise NotCarriable(f"{path.name} was changed after it was written")
    return data


def map_verified(path: Path, sha256: str) -> memoryview:
    """The out-of-band buffers of a carried value, mapped copy-on-write (writable, private to this process; no
    read, no copy), only if they are those the handoff names and nobody else can still write them. Hashing the
    mapping faults its pages in beside the replay. The mapping keeps its pages after the file is gone."""
    fd = _open_private(path)
    try:
        path.unlink()
        alone = _only_opener(fd)
        if os.fstat(fd).st_size == 0:
            mapped = memoryview(bytearray())
        else:
            mapped = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_COPY))
    finally:
        os.close(fd)
    if alone is None:  # no lease here: a copy is the only way to be sure the bytes stay those that were hashed
        mapped = memoryview(bytearray(mapped))
    elif not alone:
        mapped.release()
        raise NotCarriable(f"{path.name} is held open by another process, which could change it after its check")
    if hashlib.sha256(mapped).hexdigest() != sha256:
        mapped.release()
        raise NotCarriable(f"{path.name} was changed after it was written")
    return mapped


def _only_opener(fd: int) -> bool | None:
    """Is ``fd`` the only open file description of its (unlinked) file? None where leases cannot tell."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EBUSY):
            return False
        return None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return True
