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

import os
import shutil
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from nb_cudaguard.carry import place as carry_place
from nb_cudaguard.carry.plan import CarryPlan, build_carry_plan, size_text
from nb_cudaguard.carry.value import Measure, NotCarriable, loads, map_verified, read_verified
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import ReplayPlan


def discard_all(binding: handoff.Binding) -> None:
    """Remove this kernel's carried values wherever a restart may have put them (one that never came back, or a
    handoff that was refused)."""
    for root in carry_place.roots():
        shutil.rmtree(root / f"carry-{binding.slug}", ignore_errors=True)


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
) -> tuple[ReplayPlan, dict | None, CarryPlan]:
    """Before the restart: decide, write the carried values, and return the plan to replay and the manifest."""
    binding = handoff.binding_for(shell, create_secret=True)
    discard_all(binding)  # a restart that never came back leaves one behind
    directory = carry_place.choose_root(guard.carry_max_bytes) / f"carry-{binding.slug}"
    directory.mkdir(mode=0o700)
    plan = plan_for(
        shell, guard, base, directory, force_carry=force_carry, no_carry=no_carry, replay_cells=replay_cells
    )
    if not plan.carried:
        shutil.rmtree(directory, ignore_errors=True)
        return base, None, plan
    where = "memory" if carry_place.in_memory(directory) else "disk"
    plan.notes.append(f"Carried values are written to {directory} ({where}).")
    manifest = {
        "dir": str(directory),
        "values": [_entry(plan.measures[name]) for name in plan.carried],
        "bytes": plan.carried_bytes,
        "base_plan": base.to_dict(),
        "first_skipped": min(step.record.seq for step in plan.steps if step.action != "replay"),
        "expected_seconds": plan.expected_seconds,
    }
    return plan.replay_plan(), manifest, plan


def _entry(m: Measure) -> dict:
    entry = {"name": m.name, "file": m.file, "sha256": m.sha256}
    if m.buffers is not None:
        entry["buffers"] = {"file": m.buffers, "sha256": m.buffers_sha256, "spans": [list(s) for s in m.spans]}
    return entry


class CarriedValues:
    """The values of one handoff: read and checked on a thread from the moment it exists, taken in by ``take``."""

    def __init__(self, manifest: dict) -> None:
        self.manifest = manifest
        self.first_skipped = int(manifest.get("first_skipped", 0))  # absent (an older nb_cudaguard): at once
        self._data: dict[str, tuple[bytes, memoryview | None, list]] = {}
        self._failure: str | None = None
        self._read_seconds = 0.0
        self.names: list[str] = []
        self.note = ""
        self._thread = threading.Thread(target=self._read, name="nb_cudaguard-carry", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        started = time.perf_counter()
        directory = Path(self.manifest["dir"])
        try:
            info = os.lstat(directory)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                raise NotCarriable(f"{directory} is not a private directory")
            for entry in self.manifest["values"]:
                stream = read_verified(directory / entry["file"], entry["sha256"])
                buffers = entry.get("buffers")  # absent: a value without arrays, or an older nb_cudaguard
                mapped = map_verified(directory / buffers["file"], buffers["sha256"]) if buffers else None
                spans = [(int(offset), int(length)) for offset, length in buffers["spans"]] if buffers else []
                self._data[entry["name"]] = (stream, mapped, spans)
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
        shell.user_ns.update(values)
        self.names = sorted(values)
        self.note = (
            f"carried {len(values)} value(s), {size_text(self.manifest['bytes'])}: read and checked in "
            f"{self._read_seconds:.2f} s beside the replay ({waited:.2f} s waited for), unpickled in "
            f"{time.perf_counter() - begun - waited:.2f} s"
        )
        return None


def discard(manifest: dict | None) -> None:
    """A refused handoff: its carried values are never read."""
    if manifest and manifest.get("dir"):
        shutil.rmtree(manifest["dir"], ignore_errors=True)
