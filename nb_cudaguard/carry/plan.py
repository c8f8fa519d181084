"""Carry or recompute: per cell of the replay plan, run it again or skip it because its values are carried.

The approach is ElasticNotebook's store-or-recompute plan, applied to a poisoned GPU session: a cell is worth
skipping when loading what it built costs less than running it (and whatever it needs) again. The expected time to
ready is the recorded duration of each replayed cell plus, for each carried value, its pickle time and the time to
write and read its bytes. The search over the cells that may be skipped (``carry_search``) is exact for up to 14
of them, within a time cap; it evaluates each choice with the same backward walk as the minimal replay plan, so
that cells needed only by a carried cell drop out too.

Correctness first. A name is carried only if:

* its value pickles as a plain CPU object within the budgets (``carry.measure``);
* every recorded cell that binds or changes it is in the plan and is skipped (a replayed ``labels.append(7)`` on a
  carried ``labels`` would append twice), the failing cell does not change it, and no replayed cell reads it before
  its last change (that cell would see the final value, not the one it saw);
* it shares no object with another name (``identity``): those are rebuilt together by replay.

A cell is skipped only when it has no effect beyond its names that the journal knows of: no ``!`` line, no magic,
no ``open(...)``, no star import, no ``del``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nb_cudaguard.carry import identity
from nb_cudaguard.carry import value as carry
from nb_cudaguard.carry.planner import CarryStep, Planner
from nb_cudaguard.carry.search import Search
from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.replay.plan import PlanStep, ReplayPlan

# Bytes per second assumed for writing a carried value and for reading its pickle stream back (a local disk, page
# cache), and for checking its mapped buffers (SHA-256 over pages already in memory).
DISK_BYTES_PER_SECOND = 250e6
HASH_BYTES_PER_SECOND = 1e9


@dataclass
class CarryPlan:
    base: ReplayPlan
    steps: list[CarryStep] = field(default_factory=list)
    measures: dict[str, carry.Measure] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    expected_seconds: float = 0.0
    # name -> the training cell it came from: values only a cell the snapshot replaces bound (its loop's last batch
    # or loss, a counter), carried beside the snapshot so that they exist again though no cell rebuilds them
    loose: dict[str, int] = field(default_factory=dict)

    @property
    def carried(self) -> list[str]:
        return sorted({name for step in self.steps if step.action == "carry" for name in step.names})

    @property
    def written(self) -> list[str]:
        """Every value whose file the restart carries: those the plan carries instead of cells, and the loose."""
        return sorted({*self.carried, *self.loose})

    @property
    def carried_bytes(self) -> int:
        return sum(self.measures[name].bytes for name in self.carried)

    def replay_plan(self) -> ReplayPlan:
        """The plan the new process runs: replayed cells only; the others are left out with the reason."""
        plan = ReplayPlan(self.base.mode, self.base.target, unresolved=set(self.base.unresolved))
        plan.steps = [PlanStep(s.record, s.reason) for s in self.steps if s.action == "replay"]
        skipped = [PlanStep(s.record, s.reason) for s in self.steps if s.action != "replay"]
        plan.excluded = sorted([*self.base.excluded, *skipped], key=lambda s: s.record.seq)
        plan.notes = list(self.base.notes)
        plan.brings_back, plan.leaves_out = list(self.base.brings_back), list(self.base.leaves_out)
        return plan

    def step_text(self, step: CarryStep) -> str:
        """What happens to one cell: replayed, or skipped, with the values carried instead, their size and cost."""
        if step.action == "replay":
            return "replay"
        if step.action == "skip":
            return f"skip: {step.reason}"
        measures = [self.measures[name] for name in step.names]
        size, seconds = size_text(sum(m.bytes for m in measures)), sum(cost_of(m) for m in measures)
        return f"skip, carried: {', '.join(step.names)} ({size}, about {seconds:.2f} s to carry)"

    def to_text(self) -> str:
        base_seconds = self.base.recorded_seconds
        lines = [
            f"nb_cudaguard carry plan ({self.base.mode}): ready in about {self.expected_seconds:.2f} s "
            f"instead of {base_seconds:.2f} s of plain replay; carrying {len(self.carried)} value(s), "
            f"{size_text(self.carried_bytes)}"
        ]
        for step in self.steps:
            first = step.record.first_line
            first = first if len(first) <= 40 else first[:39] + "…"
            lines.append(f"  {step.record.label:>6} {step.record.duration:8.2f} s  {first:<40}  {self.step_text(step)}")
        for name in self.carried:
            m = self.measures[name]
            lines.append(f"  carried {name}: {size_text(m.bytes)}, pickled in {m.seconds:.3f} s")
        for name in sorted(self.loose):
            m = self.measures[name]
            lines.append(f"  carried {name} beside the snapshot: {size_text(m.bytes)}, pickled in {m.seconds:.3f} s")
        if self.refused:
            lines.append("Not carried (rebuilt by replay if needed):")
            lines += [f"  {name}: {why}" for name, why in sorted(self.refused.items())]
        lines += self.notes
        return "\n".join(lines)


def size_text(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count} bytes"


def cost_of(m: carry.Measure) -> float:
    """Expected seconds to carry one value: pickling and writing (a pickle measured into its files has the write in
    its time already), then reading the stream back, while its buffers are only mapped and hashed."""
    written = 0 if m.sha256 is not None else m.bytes
    read = m.bytes - m.mapped_bytes
    return m.seconds + (written + read) / DISK_BYTES_PER_SECOND + m.mapped_bytes / HASH_BYTES_PER_SECOND


def build_carry_plan(
    base: ReplayPlan,
    journal: Journal,
    namespace: dict,
    *,
    max_bytes: int,
    max_seconds: float,
    force_carry: Iterable[str] = (),
    no_carry: Iterable[str] = (),
    replay_cells: Iterable[int] = (),
    directory: Path | None = None,
    hidden: Iterable[str] = (),
    loose: dict[str, int] | None = None,
) -> CarryPlan:
    """Decide per cell. With ``directory``, each candidate is pickled once, straight into a file there (0600): the
    pickle that measures a value is the one the restart carries, and the files of values not carried are deleted.
    Without it (a dry run, the panel), values are measured to nowhere and nothing is written."""
    plan = CarryPlan(base)
    planner = Planner(base, journal, namespace)
    replay_set = set(replay_cells)
    force, never = set(force_carry), set(no_carry)
    skippable: list[CellRecord] = []
    for record in planner.cells:
        why = planner.why_not_skippable(record, replay_set)
        if why is None:
            skippable.append(record)
        else:
            for name in planner.writes(record) & set(namespace):
                plan.refused.setdefault(name, f"its cell {record.label} {why}")
    candidates = set().union(*(planner.writes(c) for c in skippable)) - set(plan.refused) if skippable else set()
    for name in sorted(candidates):
        why = "you asked not to carry it" if name in never else planner.why_not_carriable(name)
        if why is not None:
            plan.refused[name] = why
    hidden = set(hidden)
    live = {n: v for n, v in namespace.items() if _is_user_value(n, v, hidden)}
    sharing = identity.shared(live)
    on_disk = 0
    for name in sorted(candidates - set(plan.refused)):
        if sharing.get(name):
            others = ", ".join(sorted(sharing[name])[:3])
            plan.refused[name] = f"shares objects with {others}: rebuilt together by replay, never carried apart"
            continue
        path = _value_path(directory, plan, name) if directory is not None else None
        m = carry.measure(name, namespace[name], max_bytes, max_seconds, path, max_bytes - on_disk)
        plan.measures[name] = m
        on_disk += m.bytes if m.file is not None else 0
        if m.reason is not None:  # not carriable
            plan.refused[name] = m.reason
    needs = _needs(base, planner)
    while True:
        _search(plan, planner, skippable, needs, max_bytes, force)
        if directory is None or _settle(plan, namespace, directory, max_bytes, max_seconds):
            break
    for name in sorted(force - set(plan.carried)):
        plan.notes.append(f"{name} cannot be carried: {plan.refused.get(name, 'no cell of the plan binds it')}.")
    _carry_loose(plan, journal, namespace, loose or {}, directory, max_bytes, max_seconds, never)
    return plan


def _carry_loose(
    plan: CarryPlan,
    journal: Journal,
    namespace: dict,
    loose: dict[str, int],
    directory: Path | None,
    max_bytes: int,
    max_seconds: float,
    never: set[str],
) -> None:
    """The values only the cells the snapshot replaces bound, measured (and written) after the plan's own, within
    what they left of the budget; one that cannot be carried is said now, before the restart."""
    left = max_bytes - sum(plan.measures[name].bytes for name in plan.carried)
    for name, seq in sorted(loose.items()):
        if name in plan.carried or name not in namespace:
            continue
        record = journal.by_seq(seq)
        where = record.label if record is not None else f"#{seq}"
        if name in never:
            plan.notes.append(f"{name} is not rebuilt: only {where} bound it, which the snapshot replaces.")
            continue
        path = _value_path(directory, plan, name) if directory is not None else None
        m = carry.measure(name, namespace[name], left, max_seconds, path, left)
        if m.reason is not None or (directory is not None and m.file is None):
            why = m.reason or "no room was left for it"
            plan.notes.append(f"{name} is not rebuilt: only {where} bound it, which the snapshot replaces; {why}.")
            continue
        plan.measures[name] = m
        plan.loose[name] = seq
        left -= m.bytes


def _is_user_value(name: str, value, hidden: set[str]) -> bool:
    return (
        not name.startswith("_")
        and name not in ("In", "Out", "exit", "quit")
        and name not in hidden
        and not (isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)))
    )


def _needs(base: ReplayPlan, planner: Planner) -> set[str]:
    target = base.target
    needs = set(target.names.used | target.names.mutated) if target is not None else set()
    for record in planner.cells:
        needs |= record.names.deferred
    if base.mode != "minimal":
        needs |= set().union(*(planner.writes(c) for c in planner.cells)) if planner.cells else set()
    return needs


def _search(
    plan: CarryPlan, planner: Planner, skippable: list[CellRecord], needs: set[str], max_bytes: int, force: set[str]
) -> None:
    prices = {n: (cost_of(m), m.bytes) for n, m in plan.measures.items() if m.carriable and n not in plan.refused}
    search = Search(planner, needs, prices, max_bytes)
    forced = {c.seq for c in skippable if planner.writes(c) & force}
    if search.total(forced) is None:
        forced = set()
    chosen = search.best(forced, {c.seq for c in skippable} - forced)
    cut_short = "The search for the fastest plan stopped at its limit: a faster one may exist."
    if not search.complete and cut_short not in plan.notes:  # the plan may be made again after a failed write
        plan.notes.append(cut_short)
    seconds, steps = search.total(chosen), planner.walk(chosen, needs)
    if seconds is None or steps is None:  # the plain replay always passes the rules; this only guards a bug
        seconds, steps = plan.base.recorded_seconds, [CarryStep(r, "replay", "runs again") for r in planner.cells]
    plan.expected_seconds, plan.steps = seconds, steps


def _value_path(directory: Path, plan: CarryPlan, name: str) -> Path:
    """A name not used before in this plan: each value measured or written, and each refusal, changes it."""
    return directory / f"value-{len(plan.measures)}-{len(plan.refused)}-{name[:40]}.pkl"


def _settle(plan: CarryPlan, namespace: dict, directory: Path, max_bytes: int, max_seconds: float) -> bool:
    """Leave on disk exactly the carried values. Files of values not carried are deleted; a carried value that was
    measured without a file (others had spent the disk budget) is written now, and if that fails (disk full, a
    pickle that breaks this time) it is refused and the plan is made again without it. True when done."""
    carried = set(plan.carried)
    for name, m in plan.measures.items():
        if m.file is not None and name not in carried:
            for file in (m.file, m.buffers):
                if file is not None:
                    (directory / file).unlink(missing_ok=True)
            m.file = m.buffers = None
    left = max_bytes - sum(plan.measures[name].bytes for name in carried if plan.measures[name].file is not None)
    for name in sorted(carried):
        if plan.measures[name].file is not None:
            continue
        written = carry.measure(name, namespace[name], left, max_seconds, _value_path(directory, plan, name))
        if written.reason is not None:  # not carriable
            plan.refused[name] = written.reason + "; replayed instead"
            plan.notes.append(f"{name} could not be carried ({written.reason}); its cells are replayed instead.")
            return False
        plan.measures[name] = written
        left -= written.bytes
    return True
