"""The snapshot across the exec: written to one file before it, named in the signed handoff, checked after it.

The host copies live in the old process's memory, which the exec ends, so the restart writes them (``torch.save``:
tensors and plain data only) into a private directory where carried values go too (``carry.place``: memory when the
whole file fits with a reserve left, else disk), created ``0700`` with its file ``0600``, ``O_EXCL|O_NOFOLLOW``. The
manifest, inside the handoff signed with the kernel's key, holds the file's SHA-256: the new process checks it
before it reads anything, and reads with ``torch.load(weights_only=True)``, which runs no code from the file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nb_cudaguard.carry import place as carry_place
from nb_cudaguard.carry.files import mark_owner, remove_stale_owned
from nb_cudaguard.errors import NbCudaguardError
from nb_cudaguard.record.journal import Journal
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import ReplayPlan
from nb_cudaguard.snapshot.plan import SnapshotPlan, snapshot_plan
from nb_cudaguard.snapshot.store import Snapshots

VERSION = 1
_FILE = "state.pt"


class SnapshotManifestError(ValueError, NbCudaguardError):
    """A manifest this nb_cudaguard cannot read: the snapshot is not used and the training cells are replayed."""


@dataclass(frozen=True)
class SnapshotManifest:
    directory: str
    sha256: str
    nbytes: int
    seq: int  # the journal position of the cell the snapshot was taken after
    label: str
    taken_at: float
    skips: dict[int, list[str]]  # seq of each cell to skip -> the paths it trained
    extra: list[str] = field(default_factory=list)  # paths trained only by cells the plan leaves out
    rows: dict[int, str] = field(default_factory=dict)  # seq -> the plan row's wording
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "dir": self.directory,
            "sha256": self.sha256,
            "bytes": self.nbytes,
            "seq": self.seq,
            "label": self.label,
            "taken_at": self.taken_at,
            "skips": {str(seq): list(paths) for seq, paths in self.skips.items()},
            "extra": list(self.extra),
            "rows": {str(seq): row for seq, row in self.rows.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SnapshotManifest:
        if data.get("version") != VERSION:
            raise SnapshotManifestError(f"snapshot manifest version {data.get('version')!r}; this reads {VERSION}")
        try:
            return cls(
                directory=str(data["dir"]),
                sha256=str(data["sha256"]),
                nbytes=int(data["bytes"]),
                seq=int(data["seq"]),
                label=str(data["label"]),
                taken_at=float(data["taken_at"]),
                skips={int(seq): [str(p) for p in paths] for seq, paths in dict(data["skips"]).items()},
                extra=[str(path) for path in data.get("extra", [])],
                rows={int(seq): str(row) for seq, row in dict(data.get("rows", {})).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotManifestError(f"snapshot manifest without a valid {exc}") from exc


def directory_for(binding: handoff.Binding, root: Path) -> Path:
    return root / f"snapshot-{binding.slug}"


def discard(binding: handoff.Binding) -> None:
    """Remove this kernel's snapshot file wherever a restart may have put it (never following a symlink)."""
    for root in carry_place.roots():
        path = directory_for(binding, root)
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


def remove_stale() -> list[str]:
    """Snapshots written by kernels that ended before they could read them back."""
    return remove_stale_owned("snapshot-", "a snapshot of a kernel that ended")


def prepare(
    shell, journal: Journal, snapshots: Snapshots, plan: ReplayPlan
) -> tuple[SnapshotPlan, SnapshotManifest | None]:
    """Before the restart: which cells the snapshot replaces and, if any, the file the new process loads."""
    decided = snapshot_plan(plan, journal, snapshots)
    snapshot = decided.snapshot
    binding = handoff.binding_for(shell, create_secret=True)
    discard(binding)
    if not decided.restored or snapshot is None:
        return decided, None
    import torch

    restored = set(decided.restored)
    content = {
        "roots": {
            r.path: {"kind": r.kind, "cls": r.cls, "state": r.state} for r in snapshot.roots if r.path in restored
        },
        "rng": {seq: snapshots.effects[seq].rng for seq in decided.skips},
        "held": {top: snapshot.held[top].content() for top in decided.held},
    }
    directory = directory_for(binding, carry_place.choose_root(2 * snapshot.nbytes))
    directory.mkdir(mode=0o700)
    mark_owner(directory)
    descriptor = os.open(directory / _FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        torch.save(content, stream)
    rows = {seq: decided.row(seq) or "" for seq in {*decided.skips, *decided.left_out}}
    manifest = SnapshotManifest(
        str(directory), _sha256(directory / _FILE), snapshot.nbytes, snapshot.seq, snapshot.label,
        snapshot.taken_at, dict(decided.skips), list(decided.extra), rows,
    )  # fmt: skip
    return decided, manifest


def load(manifest: SnapshotManifest) -> dict[str, Any]:
    """The snapshot's content, once its file proved to be the one the handoff names; the directory is removed
    (the mapping keeps the pages while the tensors live)."""
    import torch

    directory = Path(manifest.directory)
    path = directory / _FILE
    try:
        info = os.lstat(directory)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise SnapshotManifestError(f"{directory} is not a private directory")
        if _sha256(path) != manifest.sha256:
            raise SnapshotManifestError(f"{path} is not the file the handoff names (its SHA-256 differs)")
        content: dict[str, Any] = torch.load(path, weights_only=True, mmap=True)
        return content
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
