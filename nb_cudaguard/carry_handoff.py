"""Carried values across the exec: written next to the handoff, bound to it, read back before the replay.

The values sit in a private directory beside the handoff (0700, files 0600). The handoff, which is signed with
the kernel's key, names each file with the SHA-256 of its bytes, so a file that was changed or not written by this
kernel is refused before it is unpickled. Everything is loaded before the first replayed cell runs; if any value
cannot be loaded, none is used and the new process replays the plan it would have run without carrying (the plan
travels in the handoff too): carrying can make a rebuild faster, never lose it.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from . import handoff
from .carry import NotCarriable, load
from .carry_plan import CarryPlan, build_carry_plan
from .replay_plan import ReplayPlan


def carry_dir(binding: handoff.Binding) -> Path:
    return handoff.private_dir() / f"carry-{binding.slug}"


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
    directory = carry_dir(handoff.binding_for(shell, create_secret=True))
    shutil.rmtree(directory, ignore_errors=True)  # a restart that never came back leaves one behind
    directory.mkdir(mode=0o700)
    plan = plan_for(
        shell, guard, base, directory, force_carry=force_carry, no_carry=no_carry, replay_cells=replay_cells
    )
    if not plan.carried:
        shutil.rmtree(directory, ignore_errors=True)
        return base, None, plan
    manifest = {
        "dir": str(directory),
        "values": [
            {"name": name, "file": plan.measures[name].file, "sha256": plan.measures[name].sha256}
            for name in plan.carried
        ],
        "bytes": plan.carried_bytes,
        "base_plan": base.to_dict(),
        "expected_seconds": plan.expected_seconds,
    }
    return plan.replay_plan(), manifest, plan


def restore(shell, manifest: dict) -> tuple[list[str], float, str | None]:
    """Load every carried value into the namespace, or none. Returns (names, seconds, why none were loaded)."""
    started = time.perf_counter()
    directory = Path(manifest["dir"])
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise NotCarriable(f"{directory} is not a private directory")
        values = {}
        for entry in manifest["values"]:
            values[entry["name"]] = load(directory / entry["file"], entry["sha256"])
    except Exception as exc:
        return [], time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    shell.user_ns.update(values)
    return sorted(values), time.perf_counter() - started, None


def discard(manifest: dict | None) -> None:
    """A refused handoff: its carried values are never read."""
    if manifest and manifest.get("dir"):
        shutil.rmtree(manifest["dir"], ignore_errors=True)
