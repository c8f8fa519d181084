"""What a restart's replay did: the cells it ran, the one that failed, the values it carried, the diagnosis.

The new process fills it in as the replay goes; the next cell's summary, ``%cudaguard replay --report``, the panel's
status line and ``nb-cudaguard run`` all read it from ``CudaGuard.last_replay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.replay.plan import ReplayPlan


@dataclass
class ReplayOutcome:
    plan: ReplayPlan
    how: str
    pid: int
    restarts: int
    ran: list[tuple[CellRecord, float]] = field(default_factory=list)
    failed: CellRecord | None = None
    error: str | None = None
    output: str = ""
    seconds: float = 0.0  # the replay's
    waited: float | None = None  # from the restart's request to the end of the replay: what the user waited
    served: int = 0
    diagnosis: str | None = None
    names: list[str] = field(default_factory=list)
    done: bool = False
    children_ended: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    carry_note: str | None = None
    missing: list[str] = field(default_factory=list)  # names the failing cell reads that no cell brought back
    lost: list[str] = field(default_factory=list)  # names built before the failure that did not come back
    in_panel: bool = False  # a panel shows the outcome: nothing is printed at the next cell

    @property
    def state(self) -> str:
        """ "recovered" only when the replay rebuilt what the failing cell reads; "failed" when a replayed cell
        failed; "incomplete" when names the failing cell reads are still missing; "nothing" when no failing cell
        was recorded (a journal emptied by loading the extension again), so nothing could be rebuilt for it."""
        if self.failed is not None:
            return "failed"
        if self.plan.target is None:
            return "nothing"
        return "incomplete" if self.missing or self.lost else "recovered"

    def headline(self) -> str:
        """The outcome in one line a person would write, for the top of the panel. Never claims what it did not
        check: "Recovered" means every name the failing cell reads exists again."""
        state = self.state
        carried = f", {len(self.carried)} value(s) carried" if self.carried or self.plan.steps else ""
        if state == "failed" and self.failed is not None:
            error = (self.error or "").splitlines()[-1] if self.error else "an error"
            return (
                f"Not recovered: the replay stopped at {self.failed.label} ({error}); the cells after it did not "
                "run. %cudaguard replay --report shows what ran."
            )
        if state == "nothing":
            return (
                "Not recovered: the kernel restarted, but nb_cudaguard had no record of the failing cell (it was "
                "loaded again after the failure), so nothing was replayed. Run the cells that build your state again."
            )
        target = self.plan.target.label if self.plan.target is not None else "the failing cell"
        if state == "incomplete" and self.missing:
            return (
                f"Not recovered: {len(self.ran)} cell(s) replayed{carried}, but {target} reads "
                f"{_few(self.missing)}, which no recorded cell defines. Run the cells that define them again."
            )
        if state == "incomplete":
            return (
                f"Partly recovered: {len(self.ran)} cell(s) replayed{carried}, but {_few(self.lost)} did not come "
                f"back (bound by cells the restart did not run, and not carried). {target} does not read them."
            )
        waited = self.waited if self.waited is not None else self.seconds
        back = f"back after {waited:.1f} s"  # the whole wait, from the restart's request: what the user waited
        return f"Recovered: {len(self.ran)} cell(s) replayed{carried}; {back}. Fix {target} and run it."

    @property
    def not_run(self) -> list[CellRecord]:
        ran = {record.seq for record, _ in self.ran}
        failed = self.failed.seq if self.failed is not None else None
        return [r for r in self.plan.records if r.seq not in ran and r.seq != failed]

    def summary(self) -> str:
        # in the user's words: how the kernel came back, not the mechanism (the PID and the path are in --report)
        how = "in place" if self.how == "exec" else "by Jupyter, after the kernel exited"
        parts = [
            f"nb_cudaguard: kernel restarted {how}",
            f"replayed {len(self.ran)}/{len(self.plan.steps)} cell(s) in {self.seconds:.2f} s",
        ]
        if self.lost:  # never "0 failure(s)" over names that did not come back
            parts.append(f"{len(self.lost)} name(s) not rebuilt: {_few(self.lost)}")
        if self.failed is not None or not self.lost:
            parts.append(f"{1 if self.failed is not None else 0} failure(s)")
        if self.carry_note:
            parts.append(self.carry_note)
        if self.failed is not None:
            parts.append(f"stopped at {self.failed.label}: {self.error}")
        if self.served:
            parts.append(f"{self.served} request(s) from the restart window run")
        if self.diagnosis:
            parts.append(f"diagnosis: {self.diagnosis.splitlines()[0][:160]}")
        return " · ".join(parts)

    def to_text(self) -> str:
        how = "in place, the same kernel" if self.how == "exec" else "Jupyter started a new kernel, this one exited"
        lines = [self.summary(), f"How: {how}", "Ran:"]
        lines += [f"  {r.label:>6} {s:8.2f} s  {r.first_line[:60]}" for r, s in self.ran] or ["  (nothing)"]
        if self.failed is not None:
            lines += [f"Failed: {self.failed.label} {self.failed.first_line[:60]}", f"  {self.error}"]
            if self.output.strip():
                lines += ["  Its output (end):", *("    " + line for line in self.output.strip().splitlines()[-15:])]
        if self.not_run:
            lines.append("Not run: " + ", ".join(r.label for r in self.not_run))
        if self.plan.excluded:
            lines.append("Left out by the plan: " + ", ".join(s.record.label for s in self.plan.excluded))
        if self.carried:
            lines.append("Carried across the restart: " + ", ".join(self.carried))
        lines.append("Names that exist now: " + (", ".join(self.names) if self.names else "(none)"))
        if self.lost:
            lines.append("Not rebuilt (they existed before the restart): " + ", ".join(self.lost))
        if self.children_ended:
            lines.append("Child processes ended before the restart: " + ", ".join(self.children_ended))
        if self.diagnosis:
            lines.append("Diagnosis (the failing cell under %%cudacheck):")
            lines += ["  " + line for line in self.diagnosis.splitlines()]
        return "\n".join(lines)


def _few(names: list[str], shown: int = 8) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
