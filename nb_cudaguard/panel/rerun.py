"""The two ways on after a fast check fired, with no restart: re-run the cell under the exact checks, or re-run the
cells that build the names it left wrong. The buttons under the error (``panel.fired``) and
``%cudaguard rerun --exact|--rebuild`` both call these.

A fast check ran its op on clamped values, so no kernel asserted and the process, its CUDA context included, is
healthy: only the names the failing cell assigned or changed are wrong. So nothing restarts. The cells to re-run
are the replay planner's (``replay.plan.rebuild_plan``), and they run as a restart's replay runs them
(``relaunch.running``: silent, so neither journaled nor shown; output kept; interruptible), under their own
numbers, so that a traceback through code they define names the cell as the user saw it.
"""

from __future__ import annotations

import re
import time
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Protocol

from nb_cudaguard.check.magics import EveryCell
from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.relaunch.running import OUTPUT_TAIL, captured, interruptible, numbered, under_exact_checks
from nb_cudaguard.replay.plan import ReplayPlan, rebuild_plan
from nb_cudaguard.snapshot.restore import mismatch, put, resolve
from nb_cudaguard.snapshot.store import Snapshots

# a function, class or module a cell bound is code, not a value a fired check could have made wrong
_CODE = (types.FunctionType, type, types.ModuleType)


class FiredError(Protocol):
    """What a fired fast check's error (``check.fast.error.FastCheckError``) tells the re-runs."""

    changed_names: list[str]


@dataclass
class FiredCell:
    """The last cell whose fast check fired (``CudaGuard.last_fired``): what both choices act on."""

    record: CellRecord
    error: FiredError

    def corrupted(self, namespace: dict) -> list[str]:
        """What the cell left wrong from the first firing on: what its source assigns or changes, and what the
        runtime saw it change (``record.observe``: a model and optimizer a library's loop stepped, though the cell
        named neither; a loop's temporaries), less functions, classes and modules it merely bound."""
        names = set(self.error.changed_names)
        observed = self.record.observed
        if observed is not None:
            rebound = {n for n in observed.rebound if not isinstance(namespace.get(n), _CODE)}
            names |= observed.changed | observed.deleted | rebound
        return sorted(names)


class RerunSession(Protocol):
    """What the re-runs read from the extension's session (``CudaGuard``)."""

    shell: Any
    journal: Journal
    snapshots: Snapshots
    every_cell: EveryCell
    last_fired: FiredCell | None
    panels: list[Any]  # what this process shows with buttons, made static when the kernel goes for good


def rebuild_cells(journal: Journal, names: list[str], target: CellRecord | None) -> list[tuple[str, list[str]]]:
    """The planner's answer as the error words it: (cell label, the wrong names it builds), in order."""
    if target is None:
        return []
    wanted = set(names)
    plan = rebuild_plan(journal, wanted, target)
    return [(r.label, sorted((r.names.defined | r.names.mutated | r.names.deleted) & wanted)) for r in plan.records]


@dataclass
class RebuildOutcome:
    """What a rebuild did: the cells it ran (with seconds), the one that failed and why, what no cell rebuilds."""

    plan: ReplayPlan
    ran: list[tuple[CellRecord, float]] = field(default_factory=list)
    failed: CellRecord | None = None
    error: str = ""
    output: str = ""
    restored: list[str] = field(default_factory=list)  # paths put back from the snapshot, in place
    snapshot: str | None = None  # the label of the cell the snapshot was taken after
    not_restored: dict[str, str] = field(default_factory=dict)  # path -> why the snapshot could not serve it

    @property
    def target(self) -> str:
        return self.plan.target.label if self.plan.target is not None else "the failing cell"

    def summary(self) -> str:
        """One line, for the status line under the error."""
        restored = f"Restored {', '.join(self.restored)} as after {self.snapshot}; " if self.restored else ""
        return restored + self._replayed()

    def _replayed(self) -> str:
        ran = ", ".join(record.label for record, _ in self.ran) or "nothing"
        seconds = sum(s for _, s in self.ran)
        if self.failed is not None:
            last = self.error.splitlines()[-1] if self.error else "an error"
            failed = self.failed.label
            return f"Re-ran {ran} ({seconds:.2f} s), then {failed} failed ({last}): the cells after it did not run."
        if not self.plan.steps and self.restored:
            return f"no cell needed re-running. Fix the input if not done yet, then run {self.target} again."
        if not self.plan.steps:
            return f"No earlier cell builds what {self.target} changed: fix the input and run {self.target} again."
        then = f"Fix the input if not done yet, then run {self.target} again."
        return f"Re-ran {ran} ({seconds:.2f} s), no restart. {then}"

    def to_text(self) -> str:
        lines = [f"nb_cudaguard: {self.summary()}"]
        lines += [f"  ran     {r.label:>6} {s:8.2f} s  {r.first_line[:60]}" for r, s in self.ran]
        if self.failed is not None:
            lines += [f"  failed  {self.failed.label:>6}  {self.failed.first_line[:60]}", f"    {self.error}"]
            lines += ["    " + line for line in self.output.strip().splitlines()[-15:]]
            ran = {r.seq for r, _ in self.ran} | {self.failed.seq}
            lines += [f"  not run {r.label:>6}  {r.first_line[:60]}" for r in self.plan.records if r.seq not in ran]
        lines += [f"  not restored from the snapshot: {path} ({why})" for path, why in self.not_restored.items()]
        if self.plan.unresolved:
            made = ", ".join(sorted(self.plan.unresolved))
            lines.append(f"  built by {self.target} alone, so only running it again rebuilds them: {made}")
        return "\n".join(lines)


def fired_cell(guard: RerunSession) -> FiredCell:
    if guard.last_fired is None:
        raise LookupError("no fast check has fired in this session (%cudaguard check on turns them on)")
    return guard.last_fired


def rerun_exact(guard: RerunSession, fired: FiredCell) -> BaseException | None:
    """Run the failing cell again under the exact checks, from outside any cell (a button): its error, which the
    shell has shown (``showtraceback``), or None if it ran through."""
    with numbered(guard.shell, fired.record), interruptible(), guard.every_cell.running(fired.record.source):
        result = guard.shell.run_cell(under_exact_checks(fired.record), silent=True)
    return result.error_before_exec or result.error_in_exec


def rebuild(guard: RerunSession, fired: FiredCell) -> RebuildOutcome:
    """Put back from the last snapshot, in place, what the failing cell trained (the objects stay the ones other
    names hold: a ``Trainer``'s model is the user's ``model``); then re-run, in order, the cells that build the rest
    of what it changed; stop at the first that fails."""
    names = fired.corrupted(guard.shell.user_ns)
    restored, snapshot, refused = from_snapshot(guard.snapshots, fired.record, names, guard.shell.user_ns)
    tops = {_top(path) for path in restored} - {_top(path) for path in refused}
    plan = rebuild_plan(guard.journal, [n for n in names if n not in tops], fired.record)
    outcome = RebuildOutcome(plan, restored=restored, snapshot=snapshot, not_restored=refused)
    for record in outcome.plan.records:
        begun = time.perf_counter()
        with (
            captured() as output,
            interruptible(),
            numbered(guard.shell, record),
            guard.every_cell.running(record.source),
        ):
            result = guard.shell.run_cell(record.source, silent=True)
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            outcome.failed = record
            outcome.error = "".join(traceback.format_exception_only(type(error), error)).strip()
            outcome.output = output.text()[-OUTPUT_TAIL:]
            break
        outcome.ran.append((record, time.perf_counter() - begun))
    return outcome


def from_snapshot(
    snapshots: Snapshots, fired: CellRecord, names: list[str], namespace: dict
) -> tuple[list[str], str | None, dict[str, str]]:
    """Load the last snapshot into the objects under ``names`` that it holds, where it is their state just before
    ``fired``: the same objects (by identity), of the same shapes, and no cell between the snapshot and ``fired``
    changed them. Returns the paths loaded, the snapshot's cell, and why any other path it holds was not."""
    snapshot = snapshots.latest()
    if snapshot is None:
        return [], None, {}
    wanted = set(names)
    restored: list[str] = []
    refused: dict[str, str] = {}
    for state in snapshot.roots:
        if _top(state.path) not in wanted:
            continue
        try:
            obj = resolve(state.path, namespace)
        except (KeyError, AttributeError, IndexError, TypeError, ValueError):
            refused[state.path] = "it no longer exists"
            continue
        saved = {"state": state.state, "kind": state.kind, "cls": state.cls}
        between = [
            seq
            for seq, effect in snapshots.effects.items()
            if snapshot.seq < seq < fired.seq and state.path in {**effect.trained, **effect.constructed}
        ]
        why = (
            "it is another object than the snapshot's"
            if snapshot.identities.get(state.path) != id(obj)
            else "a cell after the snapshot changed it"
            if between
            else mismatch(obj, saved)
        )
        if why is not None:
            refused[state.path] = why
            continue
        put(obj, saved)
        restored.append(state.path)
    return restored, snapshot.label, refused


def _top(path: str) -> str:
    """``model`` for ``model``, ``trainer.model`` for nothing but ``trainer``: the namespace name a path starts at."""
    return re.match(r"[A-Za-z_]\w*", path).group(0)  # type: ignore[union-attr]  # paths start with a name
