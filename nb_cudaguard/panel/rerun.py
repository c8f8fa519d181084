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

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from nb_cudaguard.check.magics import EveryCell
from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.relaunch.running import OUTPUT_TAIL, captured, interruptible, numbered, under_exact_checks
from nb_cudaguard.replay.plan import ReplayPlan, rebuild_plan


class FiredError(Protocol):
    """What a fired fast check's error (``check.fast_error.FastCheckError``) tells the re-runs."""

    changed_names: list[str]


@dataclass
class FiredCell:
    """The last cell whose fast check fired (``CudaGuard.last_fired``): what both choices act on."""

    record: CellRecord
    error: FiredError


class RerunSession(Protocol):
    """What the re-runs read from the extension's session (``CudaGuard``)."""

    shell: Any
    journal: Journal
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

    @property
    def target(self) -> str:
        return self.plan.target.label if self.plan.target is not None else "the failing cell"

    def summary(self) -> str:
        """One line, for the status line under the error."""
        ran = ", ".join(record.label for record, _ in self.ran) or "nothing"
        seconds = sum(s for _, s in self.ran)
        if self.failed is not None:
            last = self.error.splitlines()[-1] if self.error else "an error"
            failed = self.failed.label
            return f"Re-ran {ran} ({seconds:.2f} s), then {failed} failed ({last}): the cells after it did not run."
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
    """Re-run, in order, the cells that build what the failing cell changed; stop at the first that fails."""
    outcome = RebuildOutcome(rebuild_plan(guard.journal, fired.error.changed_names, fired.record))
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
