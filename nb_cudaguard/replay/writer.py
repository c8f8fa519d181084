"""Who wrote what a restart leaves on disk, and whether anyone can still take it.

A restart writes files for the process after it (the handoff, the carried values, the snapshot). A kernel killed
in the middle of a restart leaves them behind, and in ``/dev/shm`` they hold memory until the machine reboots, so
every start of the extension removes what no process can take any more. Each such file is marked with its writer:
its PID, the boot, its PID namespace, and whether it is meant for the same process (an exec keeps the PID) or for
the next one (the exit fallback, where the kernel manager starts a new process).

That mark tells a dead writer's files from a restart in flight without waiting: a file meant for the same process
whose writer has ended can never be taken (the exec'd image is that process), while a file meant for the next
process is expected to outlive its writer, and is kept for ``MAX_AGE``, as long as the new process may take to come.
A PID seen from another PID namespace (a container sharing the directory) says nothing, so there only the age
counts; a file of another boot is never valid.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_AGE = 300.0  # seconds: an exec takes about one; a kernel manager's restart a few


def boot_id() -> str:
    """This boot of the machine (a handoff from before a reboot is never valid); empty where Linux does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def mark(same_process: bool) -> dict:
    """This process as the writer of a file meant for itself after an exec (``same_process``) or for the next one."""
    return {"pid": os.getpid(), "boot": boot_id(), "pidns": _pid_namespace(), "same_process": same_process}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def left_behind(written_by: dict, age: float) -> bool:
    """True when no process can take what the writer ``written_by`` (a ``mark``) left ``age`` seconds ago: written
    on another boot, or its writer has ended and it was meant for that very process or is older than ``MAX_AGE``."""
    if written_by.get("boot") != boot_id():
        return True
    pid = int(written_by.get("pid", -1))
    if pid == os.getpid() or alive(pid):
        return False
    here = written_by.get("pidns", _pid_namespace()) == _pid_namespace()
    return age >= MAX_AGE or (here and bool(written_by.get("same_process")))
