"""Which cells of a replay plan a snapshot makes unnecessary: those whose only effect on the protected objects was
training them.

The replay still runs the cells that *construct* the objects (the class, ``model = Net().to(device)``, the
optimizer), so that the new process has objects of the right kind, wired together as the user wrote it (an
optimizer bound to the new model's parameters); the snapshot then fills them. A cell ``T`` of the plan is skipped
when all of this holds:

* it ran before the snapshot was taken, and the snapshot holds every object it changed, the same objects (not ones
  built again since);
* it changed protected objects in place (``CellEffect``: measured when it ran, not guessed); what it built (a
  batch moved to the GPU, a loss) is left unbuilt, which the next rule allows only when nothing reads it;
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
from collections.abc import Iterable
from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.replay.plan import ReplayPlan, module_names
from nb_cudaguard.snapshot.store import CellEffect, Snapshot, Snapshots, age_text, size_text


@dataclass
class SnapshotPlan:
    snapshot: Snapshot | None
    skips: dict[int, list[str]] = field(default_factory=dict)  # seq of a skipped cell of the plan -> what it trained
    left_out: dict[int, list[str]] = field(default_factory=dict)  # the same, for training cells the plan leaves out
    extra: list[str] = field(default_factory=list)  # paths trained only by left-out cells: restored at the end
    labels: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def restored(self) -> list[str]:
        return sorted({path for paths in self.skips.values() for path in paths} | set(self.extra))

    def row(self, seq: int) -> str | None:
        """The plan row's wording for a cell the snapshot replaces, else None."""
        if (seq not in self.skips and seq not in self.left_out) or self.snapshot is None:
            return None
        snapshot = self.snapshot
        age = age_text(time.time() - snapshot.taken_at)
        return f"skip, restored from the snapshot of cell {snapshot.label} ({size_text(snapshot.nbytes)}, {age} old)"

    def to_text(self) -> str:
        if not self.restored or self.snapshot is None:
            return "\n".join(self.notes)
        lines = [f"nb_cudaguard snapshot: {', '.join(self.restored)} restored as after {self.snapshot.label}"]
        cells = sorted({*self.skips, *self.left_out})
        lines += [f"  {self.labels.get(seq, f'#{seq}'):>6}  {self.row(seq)}" for seq in cells]
        return "\n".join(lines + self.notes)


def snapshot_plan(plan: ReplayPlan, journal: Journal, snapshots: Snapshots) -> SnapshotPlan:
    snapshot = snapshots.latest()
    result = SnapshotPlan(snapshot, labels={record.seq: record.label for record in journal})
    if snapshot is None or plan.target is None:
        return result
    steps = [step.record for step in plan.steps]
    in_plan = {record.seq for record in steps}
    later_reads = _reads_after(steps, plan.target)
    built = _builders(snapshots, snapshot)
    candidates: dict[int, list[str]] = {}
    modules = module_names(steps)
    for record in steps:
        why = _why_not(record, snapshot, snapshots, later_reads, modules)
        if why is None:
            candidates[record.seq] = sorted(snapshots.effects[record.seq].trained)
        elif record.seq in snapshots.effects and snapshots.effects[record.seq].trained:
            result.notes.append(f"{record.label} is replayed: {why}")
    while True:
        tops = {seq: {snapshots.effects[seq].tops[p] for p in paths} for seq, paths in candidates.items()}
        dropped = {
            seq
            for seq in candidates
            if any(r.seq not in candidates and seq < r.seq <= snapshot.seq and tops[seq] & r.names.used for r in steps)
            or any(built.get(path) not in in_plan or built[path] in candidates for path in candidates[seq])
        }
        first = min((seq for seq in candidates if seq not in dropped), default=None)
        last_built = max((built.get(p, 0) for s, ps in candidates.items() if s not in dropped for p in ps), default=0)
        if first is not None and last_built > first:
            dropped |= {seq for seq in candidates if seq < last_built}
        if not dropped:
            break
        for seq in dropped:
            label = result.labels.get(seq, f"#{seq}")
            result.notes.append(f"{label} is replayed: the objects it trained are read or built again around it")
            del candidates[seq]
    result.skips = candidates
    for step in plan.steps:
        held = holders(step.record, snapshots.effects[step.record.seq]) if step.record.seq in candidates else set()
        if held:
            label = step.record.label
            result.notes.append(
                f"{label} is not run again: {', '.join(sorted(held))} is rebuilt by its cells and given what "
                f"{label} trained; what else {label} changed in it (its own counters and logs) starts over"
            )
    _left_out(result, plan, snapshots, snapshot, built, in_plan)
    return result


def only_bound_by(plan: ReplayPlan, journal: Journal, snapshots: Snapshots, present: Iterable[str]) -> dict[str, int]:
    """The user's names that a cell the snapshot replaces bound or changed last, each with that cell: a training
    loop's last batch, last loss, counters, the ``history`` it appended to. The snapshot restores what the cell
    trained, not these, and no replayed cell after it binds them again, so the restart carries them where it can
    (``carry.plan``: taken in at that cell's place, after the cells before it replayed) and says which it cannot."""
    decided = snapshot_plan(plan, journal, snapshots)
    if not decided.skips:
        return {}
    restored = {snapshots.effects[seq].tops[path] for seq, paths in decided.skips.items() for path in paths}
    replayed = [step.record for step in plan.steps if step.record.seq not in decided.skips]
    names = set(present)
    found: dict[str, int] = {}
    for seq in sorted(decided.skips):
        record = journal.by_seq(seq)
        if record is None:
            continue
        for name in sorted((record.names.defined | record.names.mutated) & names - restored):
            if not any(r.seq > seq and name in r.names.defined | r.names.mutated for r in replayed):
                found[name] = seq
    return found


def snapshot_rows(plan: ReplayPlan, journal: Journal, snapshots: Snapshots) -> dict[int, str]:
    """Per cell the snapshot replaces, its plan row's wording (the panel's rows, the restart's plan)."""
    decided = snapshot_plan(plan, journal, snapshots)
    return {seq: row for seq in {*decided.skips, *decided.left_out} if (row := decided.row(seq)) is not None}


def _left_out(
    result: SnapshotPlan, plan: ReplayPlan, snapshots: Snapshots, snapshot: Snapshot, built: dict, in_plan: set
) -> None:
    """Training cells the plan leaves out (their names are not needed: ``opt.step()`` in a loop changes ``model``
    where no static analysis sees it). Replaying only what built the objects would give the failing cell untrained
    ones; the snapshot gives it the trained state, restored once the replay is done."""
    replayed = {p for seq in in_plan - set(result.skips) for p in getattr(snapshots.effects.get(seq), "trained", {})}
    extra: set[str] = set()
    for step in plan.excluded:
        record, effect = step.record, snapshots.effects.get(step.record.seq)
        if effect is None or not effect.trained or record.status != "ok" or record.seq > snapshot.seq:
            continue
        paths = [p for p, ident in effect.trained.items() if snapshot.identities.get(p) == ident]
        paths = [p for p in paths if built.get(p) in in_plan and p not in replayed]
        if paths:
            result.left_out[record.seq] = sorted(paths)
            extra |= set(paths)
    result.extra = sorted(extra - {p for paths in result.skips.values() for p in paths})


def _builders(snapshots: Snapshots, snapshot: Snapshot) -> dict[str, int]:
    """For each path of the snapshot, the cell that built the object it holds (absent where none was seen)."""
    built: dict[str, int] = {}
    for path, ident in snapshot.identities.items():
        seq = _built_at(snapshots, path, ident)
        if seq is not None:
            built[path] = seq
    return built


def _why_not(
    record: CellRecord, snapshot: Snapshot, snapshots: Snapshots, later_reads: dict[int, set[str]], modules: set
) -> str | None:
    effect = snapshots.effects.get(record.seq)
    if effect is None or not effect.trained:
        return "it trained nothing the snapshot keeps"
    if record.seq > snapshot.seq:
        return f"it ran after the snapshot of {snapshot.label}"
    for path, ident in effect.trained.items():
        if snapshot.identities.get(path) != ident:
            return f"the snapshot does not hold the {path} it trained"
    names = record.names
    if names.side_effects or names.magics or names.deleted or names.syntax_error:
        return "it has effects beyond its names"
    tops = {effect.tops[path] for path in effect.trained} | holders(record, effect)
    writes = names.defined | (names.mutated - (names.call_mutated & modules))
    read_later = (writes - tops) & later_reads[record.seq]
    if read_later:
        return "later cells read " + ", ".join(sorted(read_later)[:3]) + ", which it binds"
    return None


def holders(record: CellRecord, effect: CellEffect) -> set[str]:
    """The names the cell changed only by calling them (``trainer.train()``), and inside which the snapshot saw
    what the call did to the GPU state: it trained objects there, or built them there (a ``Trainer`` builds its
    optimizer and scheduler inside ``train()``). Replay rebuilds such an object and the snapshot gives it what
    was trained; what else the call changed in it (a ``Trainer``'s step counter and log history) is as the rebuild
    leaves it, which the plan says (``snapshot_plan``) instead of training again."""
    names = record.names
    called = names.call_mutated - names.defined - names.rebound
    inside = {effect.tops[path] for path in (*effect.trained, *effect.constructed) if "." in path or "[" in path}
    return called & inside


def _reads_after(steps: list[CellRecord], target: CellRecord) -> dict[int, set[str]]:
    """For each step, the names read by the steps after it and by the failing cell (and inside functions)."""
    reads = _read_before_bound(target)
    for record in steps:
        reads |= record.names.deferred
    found: dict[int, set[str]] = {}
    for record in reversed(steps):
        found[record.seq] = set(reads)
        reads |= _read_before_bound(record)
    return found


def _read_before_bound(record: CellRecord) -> set[str]:
    """The names a cell reads or changes before it binds them itself: ``loss = f(x); loss.backward()`` does not
    need an earlier ``loss``, nor a loop's ``out = model(xb)`` an earlier ``out`` (``record.cellorder``)."""
    names = record.names
    return names.used | (names.mutated - names.defined)


def _built_at(snapshots: Snapshots, path: str, ident: int) -> int | None:
    """The cell that built the object now at ``path`` (the last one that put an object of this id there)."""
    return max((seq for seq, e in snapshots.effects.items() if e.constructed.get(path) == ident), default=None)
