"""Where carried values are written: in memory when the whole carry budget safely fits there, else on disk.

Writing a few hundred MB into a new file on a disk-backed file system is throttled to the disk's writeback speed
(about 350 MB/s on our test machine), while a tmpfs takes it at memory speed (1.5 GB/s or more): for a large
DataFrame that is most of what carrying costs. A tmpfs cannot hand its pages back under memory pressure (there is
often no swap), though, and a kernel killed for memory loses everything the restart was meant to keep. So a memory
file system (the handoff's own directory when it is one, else ``/dev/shm``) is used only when the whole budget
(``CudaGuard.carry_max_bytes``) fits in its free space and would still leave a reserve of the memory available to
this process, which inside a container is its cgroup's limit, not the machine's; otherwise a directory on disk.
After the exec the old process's copies are gone and the new process maps the same pages, so carrying through
memory never holds the data three times.
"""

from __future__ import annotations

import os
from pathlib import Path

from nb_cudaguard.replay import handoff

SHM = Path("/dev/shm")
_RAM_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs"})
# Memory left free after the whole budget is written: the larger of this and a tenth of what is available.
_RESERVE_BYTES = 1 << 30


def roots() -> list[Path]:
    """Every directory a carry may be under, for cleaning up: those that exist and are private directories of this
    user. One that another user made at our name (``/dev/shm`` is open to all) is never looked into: nothing was
    written there (``choose_root`` refuses it too), and reading it fails with a permission error."""
    found = []
    for candidate in (_private_or_none(), _shm_dir(), _cache_dir()):
        if candidate is None or candidate in found:
            continue
        try:
            found.append(handoff.private_under(candidate, create=False))
        except (OSError, handoff.HandoffError):
            continue
    return found


def _private_or_none() -> Path | None:
    try:
        return handoff.private_dir(create=False)
    except (OSError, handoff.HandoffError):
        return None


def _shm_dir() -> Path:
    return SHM / f"nb_cudaguard-{os.getuid()}"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / f"nb_cudaguard-{os.getuid()}"


def choose_root(budget: int) -> Path:
    """The private directory to write carried values under: the handoff's own, or ``/dev/shm``, when ``budget``
    bytes fit in memory there; else a directory on disk (the handoff's, or the user's cache directory where the
    handoff's is in memory: a runtime directory or a tmpfs ``/tmp`` too small for the budget)."""
    private = handoff.private_dir()
    if fits_in_memory(private, budget):
        return private
    for directory, usable in (
        (_shm_dir(), fits_in_memory(SHM, budget)),
        (_cache_dir(), in_memory(private)),
    ):
        if not usable:
            continue
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            return handoff.private_under(directory)
        except (OSError, handoff.HandoffError):  # taken by someone else, or not writable: try the next
            continue
    return private


def in_memory(directory: Path) -> bool:
    return file_system_type(directory) in _RAM_FILE_SYSTEMS


def fits_in_memory(directory: Path, budget: int) -> bool:
    """True when ``directory`` is a memory file system with room for ``budget`` bytes that still leaves the
    reserve of available memory."""
    if not in_memory(directory):
        return False
    try:
        info = os.statvfs(directory)
    except OSError:
        return False
    available = memory_available()
    if available is None or info.f_bavail * info.f_frsize < budget:
        return False
    return available - budget >= max(_RESERVE_BYTES, available // 10)


def file_system_type(path: Path) -> str | None:
    """The type of the file system ``path`` is on, from the mount that holds it (``/proc/self/mountinfo``)."""
    try:
        target = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
    except OSError:
        return None
    best, kind = "", None
    for line in lines:
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, kind = mount_point, line.split(" - ", 1)[1].split(" ")[0]
    return kind


def memory_available() -> int | None:
    """Bytes this process may still use: the machine's ``MemAvailable``, or less where its cgroup or one above it
    has a memory limit (v2 or v1). None where none of these can be read (not Linux)."""
    figures = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            figures += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
    except (OSError, ValueError):
        pass
    try:
        memberships = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        memberships = []
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, files = Path("/sys/fs/cgroup"), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, files = Path("/sys/fs/cgroup/memory"), ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        directory = base / path.lstrip("/")  # absent inside a cgroup namespace: its root is then base itself
        while True:
            room = _room(directory, *files)
            if room is not None:
                figures.append(room)
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return min(figures) if figures else None


def _room(directory: Path, limit_file: str, usage_file: str) -> int | None:
    try:
        limit, usage = (directory / limit_file).read_text().strip(), (directory / usage_file).read_text().strip()
    except OSError:
        return None
    return int(limit) - int(usage) if limit.isdigit() and usage.isdigit() else None
