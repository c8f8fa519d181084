"""Which cells of a replay plan a snapshot makes unnecessary: those whose only effect on the protected objects was
training them.

The replay still runs the cells that *construct* the objects (the class, ``model = Net().to(device)``, the
optimizer), so that the new process has objects of the right kind, wired together as the user wrote it (an
optimizer bound to the new model's parameters); the snapshot then fills them. A cell ``T`` of the plan is skipped
when all of this holds:

* it ran before the snapshot was taken, and the snapshot holds every object it changed, the same objects (not ones
  built again since);
* it changed protected objects in place and built none (``CellEffect``: measured when it ran, not guessed);
* it has no effect beyond its names (no ``!`` line, no magic, no file opened, no ``del``), and every other name it
  binds is read by no later cell of the plan, nor by the failing cell (``loss = ...`` read afterwards keeps it);
* no replayed cell between it and the snapshot reads those objects (it would see them untrained);
* the cells that built those objects are replayed, and ran before the first skipped cell, so that in the new process
  every object can be checked against the snapshot before anything is skipped.

The skipped cells stay in the plan the restart hands over (the carry plan sees them as replayed, so the data they
read is rebuilt too): if a rebuilt object does not match its snapshot, the cells that trained it run after all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.replay.plan import ReplayPlan, module_names
from nb_cudaguard.snapshot.store import Snapshot, Snapshots, age_text, size_text


@dataclass
class SnapshotPlan:
    snapshot: Snapshot | None
    skips: dict[int, list[str]] = field(default_factory=dict)  # seq of a skipped cell -> the paths it trained
    built_at: dict[str, int] = field(default_factory=dict)  # restored path -> seq of the cell that built it
    notes: list[str] = field(default_factory=list)

    @property
    def restored(self) -> list[str]:
        return sorted({path for paths in self.skips.values() for path in paths})

    def row(self, seq: int) -> str | None:
        """The plan row's wording for a skipped cell, else None."""
        if seq not in self.skips or self.snapshot is None:
            return None
        snapshot = self.snapshot
        age = age_text(time.time() - snapshot.taken_at)
        return f"skip, restored from the snapshot of cell {snapshot.label} ({size_text(snapshot.nbytes)}, {age} old)"

    def to_text(self) -> str:
        if not self.skips or self.snapshot is None:
            return "\n".join(self.notes)
        lines = [f"nb_cudaguard snapshot: {', '.join(self.restored)} restored as after {self.snapshot.label}"]
        lines += [f"  #{seq}: {self.row(seq)}" for seq in sorted(self.skips)]
        return "\n".join(lines + self.notes)


def snapshot_plan(plan: ReplayPlan, journal: Journal, snapshots: Snapshots) -> SnapshotPlan:
    snapshot = snapshots.latest()
    result = SnapshotPlan(snapshot)
    if snapshot is None or plan.target is None:
        return result
    steps = [step.record for step in plan.steps]
    in_plan = {record.seq for record in steps}
    later_reads = _reads_after(steps, plan.target)
    candidates: dict[int, list[str]] = {}
    for record in steps:
        why = _why_not(record, snapshot, snapshots, later_reads, module_names(steps))
        if why is None:
            candidates[record.seq] = sorted(snapshots.effects[record.seq].trained)
        elif record.seq in snapshots.effects and snapshots.effects[record.seq].trained:
            result.notes.append(f"{record.label} is replayed: {why}")
    built = {path: _built_at(snapshots, path, ident) for path, ident in snapshot.identities.items()}
    while True:
        tops = {seq: {snapshots.effects[seq].tops[p] for p in paths} for seq, paths in candidates.items()}
        dropped = {
            seq
            for seq in candidates
            if any(
                r.seq not in candidates and seq < r.seq <= snapshot.seq and tops[seq] & r.names.used for r in steps
            )
            or any(built.get(path) is None or built[path] not in in_plan for path in candidates[seq])
        }
        first = min((seq for seq in candidates if seq not in dropped), default=None)
        last_built = max((built[p] for s, paths in candidates.items() if s not in dropped for p in paths), default=0)
        if first is not None and last_built > first:
            dropped |= {seq for seq in candidates if seq < last_built}
        if not dropped:
            break
        for seq in dropped:
            record = journal.by_seq(seq)
            label = record.label if record is not None else f"#{seq}"
            result.notes.append(f"{label} is replayed: the objects it trained are read or built again around it")
            del candidates[seq]
    result.skips = candidates
    result.built_at = {path: built[path] for paths in candidates.values() for path in paths if built[path]}
    return result


def _why_not(
    record: CellRecord, snapshot: Snapshot, snapshots: Snapshots, later_reads: dict[int, set[str]], modules: set
) -> str | None:
    effect = snapshots.effects.get(record.seq)
    if effect is None or not effect.trained:
        return "it trained nothing the snapshot keeps"
    if record.seq > snapshot.seq:
        return f"it ran after the snapshot of {snapshot.label}"
    if effect.constructed:
        return "it also built " + ", ".join(sorted(effect.constructed))
    for path, ident in effect.trained.items():
        if snapshot.identities.get(path) != ident:
            return f"the snapshot does not hold the {path} it trained"
    names = record.names
    if names.side_effects or names.magics or names.deleted or names.syntax_error:
        return "it has effects beyond its names"
    tops = {effect.tops[path] for path in effect.trained}
    writes = names.defined | (names.mutated - (names.call_mutated & modules))
    read_later = (writes - tops) & later_reads[record.seq]
    if read_later:
        return "later cells read " + ", ".join(sorted(read_later)[:3]) + ", which it binds"
    return None


def _reads_after(steps: list[CellRecord], target: CellRecord) -> dict[int, set[str]]:
    """For each step, the names read by the steps after it and by the failing cell (and inside functions)."""
    reads = set(target.names.used | target.names.mutated)
    for record in steps:
        reads |= record.names.deferred
    found: dict[int, set[str]] = {}
    for record in reversed(steps):
        found[record.seq] = set(reads)
        reads |= record.names.used
    return found


def _built_at(snapshots: Snapshots, path: str, ident: int) -> int | None:
    """The cell that built the object now at ``path`` (the last one that put an object of this id there)."""
    return max((seq for seq, e in snapshots.effects.items() if e.constructed.get(path) == ident), default=None)
