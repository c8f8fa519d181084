"""Carried values across the exec: written before it, bound to the handoff, read back during the replay.

The values sit in a private directory (0700, files 0600), in memory or beside the handoff (``carry_place``). The
handoff, which is signed with the kernel's key, names each file with the SHA-256 of its bytes, so a file that was
changed or not written by this kernel is refused before it is unpickled. A thread reads the pickle streams, maps the
buffer files and checks both as soon as the handoff is accepted, while the replay runs the cells that come before
the first skipped one; there the replay waits for it, unpickles (the arrays stay on the mapped pages), and puts
every value in the namespace.
If any value cannot be loaded, none is used and the replay goes on with the plan it would have run without carrying
(it travels in the handoff too), from that position: carrying can make a rebuild faster, never lose it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from nb_cudaguard.carry import place as carry_place
from nb_cudaguard.carry.manifest import CarriedBuffers, CarriedFile, CarryManifest
from nb_cudaguard.carry.plan import CarryPlan, build_carry_plan, size_text
from nb_cudaguard.carry.value import Measure, NotCarriable, loads
from nb_cudaguard.carry.verified import map_verified, read_verified
from nb_cudaguard.replay import handoff, writer
from nb_cudaguard.replay.plan import ReplayPlan

OWNER = "owner.pid"  # the writer's mark (``replay.writer.mark``), JSON; a bare PID before the mark had more


def discard_all(binding: handoff.Binding) -> None:
    """Remove this kernel's carried values wherever a restart may have put them (one that never came back, or a
    handoff that was refused)."""
    for root in carry_place.roots():
        path = root / f"carry-{binding.slug}"
        if path.is_symlink():  # never followed: whatever it points at is not ours to remove
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


def remove_stale_carries() -> list[str]:
    """Remove carried values whose kernel ended before it could take them (killed during the restart), wherever a
    restart may have put them; values of a live kernel, or of a kernel restarting right now, stay."""
    return remove_stale_owned("carry-", "values carried by a kernel that ended")


def mark_owner(directory: Path, same_process: bool = True) -> None:
    """Who may still come back for what ``directory`` holds (``remove_stale_owned``): this process after its exec,
    or, once the restart takes the exit path (``same_process=False``), the next process of the kernel. Replaced
    whole, so that it is never read half-written."""
    temporary = directory / f"{OWNER}.{os.getpid()}"
    temporary.write_text(json.dumps(writer.mark(same_process)))
    os.replace(temporary, directory / OWNER)


def remove_stale_owned(prefix: str, what: str) -> list[str]:
    """Remove the directories named ``prefix*`` under every carry root that no process can take any more
    (``writer.left_behind``: at once where its writer was to be exec'd and has ended, after ``MAX_AGE`` where the
    kernel's next process was to take it); one note per directory removed. A directory without a readable mark
    (its writer ended between creating and marking it) goes once it is older than a handoff may be."""
    notes = []
    for root in carry_place.roots():
        for directory in root.glob(f"{prefix}*"):
            try:
                if directory.is_symlink() or not directory.is_dir():
                    continue
                mark, age = _owner(directory)
                if not (writer.left_behind(mark, age) if mark else age > handoff.MAX_AGE):
                    continue
            except OSError:
                continue
            shutil.rmtree(directory, ignore_errors=True)
            notes.append(f"nb_cudaguard: removed {directory}, {what}.")
    return notes


def _owner(directory: Path) -> tuple[dict | None, float]:
    """The writer's mark of ``directory`` and its age; a bare PID (the mark before boots were written) counts as
    this boot's, for the next process."""
    try:
        path = directory / OWNER
        text, age = path.read_text(), time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None, time.time() - directory.stat().st_mtime
    try:
        mark = json.loads(text)
    except ValueError:
        return None, age
    if isinstance(mark, int):
        return {"pid": mark, "boot": writer.boot_id(), "same_process": False}, age
    return (mark if isinstance(mark, dict) else None), age


def plan_for(shell, guard, base: ReplayPlan, directory: Path | None = None, **choices) -> CarryPlan:
    """The carry plan for ``base`` against the live namespace; with ``directory``, the values are written."""
    return build_carry_plan(
        base,
        guard.journal,
        shell.user_ns,
        max_bytes=guard.carry_max_bytes,
        max_seconds=guard.carry_max_seconds,
        hidden=getattr(shell, "user_ns_hidden", {}),
        directory=directory,
        **choices,
    )


def prepare(
    shell,
    guard,
    base: ReplayPlan,
    force_carry: Iterable[str] = (),
    no_carry: Iterable[str] = (),
    replay_cells: Iterable[int] = (),
    loose: dict[str, int] | None = None,
) -> tuple[ReplayPlan, CarryManifest | None, CarryPlan]:
    """Before the restart: decide, write the carried values, and return the plan to replay and the manifest."""
    binding = handoff.binding_for(shell, create_secret=True)
    discard_all(binding)  # a restart that never came back leaves one behind
    directory = carry_place.choose_root(guard.carry_max_bytes) / f"carry-{binding.slug}"
    directory.mkdir(mode=0o700)
    mark_owner(directory)
    plan = plan_for(
        shell,
        guard,
        base,
        directory,
        force_carry=force_carry,
        no_carry=no_carry,
        replay_cells=replay_cells,
        loose=loose,
    )
    if not plan.written:
        shutil.rmtree(directory, ignore_errors=True)
        return base, None, plan
    where = "memory" if carry_place.in_memory(directory) else "disk"
    plan.notes.append(f"Carried values are written to {directory} ({where}).")
    manifest = CarryManifest(
        directory=str(directory),
        values=tuple(_entry(plan.measures[name]) for name in plan.written),
        total_bytes=sum(plan.measures[name].bytes for name in plan.written),
        base_plan=base.to_dict(),
        # read and taken in before the first cell the carry skips (the loose values are read then, and put in
        # after the replay: CarriedValues.loose)
        first_skipped=min([s.record.seq for s in plan.steps if s.action != "replay"] or list(plan.loose.values())),
        expected_seconds=plan.expected_seconds,
        loose=dict(plan.loose),
    )
    return plan.replay_plan(), manifest, plan


def _entry(m: Measure) -> CarriedFile:
    """The manifest's entry for a value the plan carries: ``measure`` wrote it to its file(s)."""
    if m.file is None or m.sha256 is None:
        raise RuntimeError(f"{m.name} is carried but was not written to a file")
    buffers = None
    if m.buffers is not None:
        if m.buffers_sha256 is None:
            raise RuntimeError(f"the buffers of {m.name} were written without their hash")
        buffers = CarriedBuffers(m.buffers, m.buffers_sha256, tuple(m.spans))
    return CarriedFile(m.name, m.file, m.sha256, buffers)


class CarriedValues:
    """The values of one handoff: read and checked on a thread from the moment it exists, taken in by ``take``."""

    def __init__(self, manifest: CarryManifest) -> None:
        self.manifest = manifest
        self.first_skipped = manifest.first_skipped
        self._data: dict[str, tuple[bytes, memoryview | None, list]] = {}
        self._failure: str | None = None
        self._read_seconds = 0.0
        self.names: list[str] = []
        self.note = ""
        self.loose: dict[str, tuple[int, object]] = {}  # name -> (its training cell's position, the value)
        self._thread = threading.Thread(target=self._read, name="nb_cudaguard-carry", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        started = time.perf_counter()
        directory = Path(self.manifest.directory)
        try:
            info = os.lstat(directory)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                raise NotCarriable(f"{directory} is not a private directory")
            for entry in self.manifest.values:
                stream = read_verified(directory / entry.file, entry.sha256)
                buffers = entry.buffers  # None: a value without arrays
                mapped = map_verified(directory / buffers.file, buffers.sha256) if buffers else None
                self._data[entry.name] = (stream, mapped, list(buffers.spans) if buffers else [])
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(directory, ignore_errors=True)
            self._read_seconds = time.perf_counter() - started

    def take(self, shell) -> str | None:
        """Wait for the reads, unpickle (in this thread: it may import modules) and put every value in the
        namespace, or none. Returns None when taken (``names``, and ``note``: what it cost), else why not."""
        begun = time.perf_counter()
        self._thread.join()
        waited = time.perf_counter() - begun
        values, failure = {}, self._failure
        if failure is None:
            try:
                values = {name: loads(*data) for name, data in self._data.items()}
            except Exception as exc:
                values, failure = {}, f"{type(exc).__name__}: {exc}"
        self._data.clear()
        if failure is not None:
            return failure
        for name, seq in self.manifest.loose.items():
            if name in values:
                self.loose[name] = (seq, values.pop(name))
        shell.user_ns.update(values)
        self.names = sorted(values)
        self.note = (
            f"carried {len(values)} value(s), {size_text(self.manifest.total_bytes)}: read and checked in "
            f"{self._read_seconds:.2f} s beside the replay ({waited:.2f} s waited for), unpickled in "
            f"{time.perf_counter() - begun - waited:.2f} s"
        )
        return None
