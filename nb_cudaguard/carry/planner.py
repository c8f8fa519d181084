"""The journal's rules for carrying, and the backward walk that prices one choice of skipped cells.

Shared by the carry plan (``carry.plan``) and the exact search over the skippable cells (``carry.search``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.replay.plan import ReplayPlan, keep_reason, module_names


@dataclass
class CarryStep:
    record: CellRecord
    action: str  # "replay" | "carry" | "skip"
    reason: str
    names: list[str] = field(default_factory=list)


class Planner:
    """The journal's rules for one replay plan and namespace, and the backward walk that prices a choice."""

    def __init__(self, base: ReplayPlan, journal: Journal, namespace: dict) -> None:
        self.base = base
        self.journal = journal
        self.namespace = namespace
        self.cells = base.records
        self.modules = module_names(self.cells)
        self.binders: dict[str, set[str]] = {}
        for record in self.cells:
            self.binders.update(record.names.function_globals)
        self.every = base.mode != "minimal"
        self.present = frozenset(namespace)
        self._facts: dict[int, tuple[frozenset, frozenset, bool]] = {}

    def writes(self, record: CellRecord) -> set[str]:
        names = record.names
        called = set().union(*(self.binders.get(n, set()) for n in names.used - names.defined))
        return names.defined | (names.mutated - (names.call_mutated & self.modules)) | called | names.deleted

    def why_not_skippable(self, record: CellRecord, replay_cells: set[int]) -> str | None:
        names = record.names
        if record.execution_count in replay_cells:
            return "you asked to replay it"
        if names.side_effects:
            return "has effects beyond its names (" + ", ".join(sorted(names.side_effects)) + ")"
        if names.magics:
            return "runs %" + ", %".join(sorted({m for m, _ in names.magics}))
        if names.syntax_error:
            return "could not be analysed"
        if names.deleted:
            return "deletes names"
        gone = sorted(n for n in self.writes(record) if n not in self.namespace)
        if gone:
            return "binds " + ", ".join(gone[:3]) + ", which no longer exist"
        return None

    def why_not_carriable(self, name: str) -> str | None:
        """The journal's rules for one name (its value is judged by ``carry.measure``)."""
        in_plan = {c.seq for c in self.cells}
        writers = [c for c in self.journal if name in self.writes(c)]
        outside = [c for c in writers if c.seq not in in_plan]
        if outside:
            return f"also changed by {outside[-1].label}, which the plan does not replay"
        last = max(c.seq for c in writers)
        early = [c for c in self.cells if c.seq < last and name in c.names.used and name not in self.writes(c)]
        if early:
            return f"read by {early[0].label} before its last change"
        return None

    def facts(self, record: CellRecord) -> tuple[frozenset, frozenset, bool]:
        """What the walk reads of a cell, worked out once: the names it writes, those it changes in place, and
        whether it is replayed whatever is needed (a process magic, a star import)."""
        facts = self._facts.get(record.seq)
        if facts is None:
            names = record.names
            changed = frozenset(names.mutated - (names.call_mutated & self.modules))
            always = keep_reason(record, set(), set()) is not None
            facts = self._facts[record.seq] = (frozenset(self.writes(record)), changed, always)
        return facts

    def advance(
        self, record: CellRecord, skip: bool, needed: frozenset, loaded: frozenset
    ) -> tuple[str, float, frozenset, frozenset, frozenset] | None:
        """One cell of the backward walk from the ready state, skipped or not: (what happens to it, the seconds it
        adds by running again, the names needed and carried before it, the names it carries), or None if that
        breaks a rule. The minimal plan's own walk, with skipped cells binding what they carry."""
        binds, changed, always = self.facts(record)
        if skip:
            load = binds & (self.present if self.every else needed)
            return ("carry" if load else "skip"), 0.0, needed - binds, loaded | load, load
        if self.every or always or binds & needed:
            if binds & loaded:
                return None  # a replayed cell would change a carried value a second time
            names = record.names
            return "replay", record.duration, (needed - names.rebound) | names.used | changed, loaded, frozenset()
        return "skip", 0.0, needed, loaded, frozenset()

    def walk(self, skipped: set[int], needs: set[str]) -> list[CarryStep] | None:
        """The steps if the cells in ``skipped`` are skipped; None if that breaks a rule."""
        needed = frozenset(needs)
        loaded: frozenset[str] = frozenset()
        steps: list[CarryStep] = []
        for record in reversed(self.cells):
            moved = self.advance(record, record.seq in skipped, needed, loaded)
            if moved is None:
                return None
            action, _, needed, loaded, load = moved
            if action == "replay":
                reason = "runs again"
            elif record.seq in skipped:
                reason = _carry_reason(sorted(load))
            else:
                reason = "only cells whose values are carried needed it"
            steps.append(CarryStep(record, action, reason, sorted(load)))
        steps.reverse()
        return steps


def _carry_reason(names: list[str]) -> str:
    return "its values are carried: " + ", ".join(names) if names else "nothing it binds is needed"
