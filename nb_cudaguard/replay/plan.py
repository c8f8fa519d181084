"""The replay plan: which recorded cells to run again after a restart, so that the failing cell can run again.

A restart loses everything, and a device-side assert leaves nothing on the GPU that could be saved first, so the
session is rebuilt by running the recorded cells again. Running all of them can take hours (a training loop), so
the default plan is the *minimal* one: walking back from the failing cell, keep each earlier successful cell that
binds, mutates or deletes a name that is still needed, and add the names that cell reads itself. A cell that binds a
name unconditionally without reading it (``x = load()``) ends the search for that name, so an earlier, overwritten
``x`` is left out. Cells that change the process rather than the namespace (``%cd``, ``%env``, ``%load_ext``...)
are always kept; ``!`` shell lines and ``%pip`` are not, since what they did to the disk is still there.

The analysis is static (see ``cellnames``): a name reached only through ``globals()`` or ``exec`` is invisible
to it. That is why the plan is shown before it runs, with durations, and why cells can be added or dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.replay.inputs import inputs_text

MODES = ("minimal", "all", "none")

# Magics that change the process (not the namespace): a fresh process needs them again, whatever they bind.
_PROCESS_MAGICS = frozenset(
    {
        "aimport",
        "alias",
        "autoawait",
        "autoreload",
        "cd",
        "config",
        "env",
        "load_ext",
        "matplotlib",
        "pylab",
        "precision",
        "reload_ext",
        "set_env",
        "xmode",
    }
)
# Magics that bind names we cannot see (a script's globals, a restored store): kept, like a star import.
_OPAQUE_MAGICS = frozenset({"run", "store"})
# nb_cudaguard's own commands only show or steer things; running them again would do nothing useful.
_OWN_SUBCOMMANDS = frozenset({"restart", "replay", "report", "status", "demo", "rerun"})


@dataclass
class PlanStep:
    record: CellRecord
    reason: str

    def to_dict(self) -> dict:
        return {"seq": self.record.seq, "label": self.record.label, "reason": self.reason}


@dataclass
class ReplayPlan:
    mode: str
    target: CellRecord | None
    steps: list[PlanStep] = field(default_factory=list)
    excluded: list[PlanStep] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    # the user's names as the restart found them (``account_names``): those a cell of the plan builds, which must
    # all exist again after the replay (or be said, in red), and those only cells it leaves out built (said before)
    brings_back: list[str] = field(default_factory=list)
    leaves_out: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[CellRecord]:
        return [step.record for step in self.steps]

    @property
    def recorded_seconds(self) -> float:
        return sum(step.record.duration for step in self.steps)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "target": self.target.seq if self.target is not None else None,
            "steps": [step.to_dict() for step in self.steps],
            "excluded": [step.to_dict() for step in self.excluded],
            "unresolved": sorted(self.unresolved),
            "notes": list(self.notes),
            "brings_back": list(self.brings_back),
            "leaves_out": list(self.leaves_out),
        }

    @classmethod
    def from_dict(cls, data: dict, journal: Journal) -> ReplayPlan:
        """Rebuild a plan in the new process from the journal that came with it (cells are found by seq)."""

        def steps(items: list[dict]) -> list[PlanStep]:
            found = []
            for item in items:
                record = journal.by_seq(int(item["seq"]))
                if record is None:
                    raise ValueError(f"the plan names cell {item.get('label')} but the journal does not hold it")
                found.append(PlanStep(record, str(item.get("reason", ""))))
            return found

        target = journal.by_seq(int(data["target"])) if data.get("target") is not None else None
        return cls(
            mode=str(data["mode"]),
            target=target,
            steps=steps(data.get("steps", [])),
            excluded=steps(data.get("excluded", [])),
            unresolved=set(data.get("unresolved", [])),
            notes=list(data.get("notes", [])),
            brings_back=[str(n) for n in data.get("brings_back", [])],
            leaves_out=[str(n) for n in data.get("leaves_out", [])],
        )

    def to_text(self) -> str:
        target = f", for the failing cell {self.target.label}" if self.target is not None else ""
        lines = [
            f"nb_cudaguard replay plan ({self.mode}{target}): {len(self.steps)} cell(s), "
            f"{self.recorded_seconds:.2f} s as recorded"
        ]
        lines += [_row(step) for step in self.steps] or ["  (nothing to replay)"]
        lines += inputs_text(self.target, self.records, self.mode)
        if self.excluded:
            lines.append("Left out:")
            lines += [_row(step) for step in self.excluded]
        if self.unresolved:
            missing = ", ".join(sorted(self.unresolved))
            if self.mode == "rebuild":
                lines.append(f"Built by the failing cell alone (only running it again rebuilds them): {missing}")
            else:
                lines.append(f"Read by the failing cell, but bound by no recorded cell: {missing}")
        if self.leaves_out:
            lines.append(
                f"Not rebuilt by this plan (only cells it leaves out bound them): {_few(set(self.leaves_out))}"
            )
        lines += self.notes
        return "\n".join(lines)


def account_names(plan: ReplayPlan, journal: Journal, present: Iterable[str]) -> None:
    """Sort the user's names that exist now by what the plan does for them: a name a successful cell before the
    failing one built comes back if a cell of the plan builds it (``brings_back``), else the plan leaves it out
    (``leaves_out``: the cells not needed, dropped or marked skip). Names only the failing cell or later ones built,
    or no recorded cell, are in neither: they were not the state the failing cell ran on."""
    kept = {step.record.seq for step in plan.steps}
    target = plan.target.seq if plan.target is not None else None
    writers: dict[str, set[int]] = {}
    for record in journal:
        if record.status == "ok" and (target is None or record.seq < target):
            names = record.names
            for name in names.defined | names.mutated:
                writers.setdefault(name, set()).add(record.seq)
    plan.brings_back, plan.leaves_out = [], []
    for name in sorted(present):
        if name in writers:
            (plan.brings_back if writers[name] & kept else plan.leaves_out).append(name)


def _row(step: PlanStep) -> str:
    first = step.record.first_line
    first = first if len(first) <= 44 else first[:43] + "…"
    return f"  {step.record.label:>6} {step.record.duration:8.2f} s  {first:<44}  {step.reason}"


def _magic_names(record: CellRecord) -> set[str]:
    return {name for name, _ in record.names.magics}


def _is_own_command(record: CellRecord) -> bool:
    return any(
        name == "cudaguard" and (line.split() or ["status"])[0] in _OWN_SUBCOMMANDS
        for name, line in record.names.magics
    )


def _exclusion(record: CellRecord, target: CellRecord | None) -> str | None:
    """Why a recorded cell can never be replayed, or None if it may be."""
    if target is not None and record.seq == target.seq:
        return "the failing cell"
    if record.status == "restart":
        return "asked for a restart"
    if record.status != "ok":
        reasons = {"error": "failed", "usage": "a usage error", "interrupted": "was interrupted"}
        return reasons.get(record.status, "did not finish")
    if record.skip_marked:
        return "marked '# cudaguard: skip'"
    if _is_own_command(record):
        return "an nb_cudaguard command"
    return None


def failing_cell(journal: Journal) -> CellRecord | None:
    """The cell the user wants to run again after the restart.

    The last CUDA failure, whatever failed after it (a typo, a failing import: those the restart does not fix) unless
    a restart came since; without one, the most recent failure. A sticky CUDA error makes every later CUDA cell fail
    with the same message, so of such a run (since the last restart) the first cell is the one that caused it.
    """
    records = list(journal)
    failed = [c for c in records if c.status == "error"]
    if not failed:
        return None
    last = failed[-1]
    cuda = [c for c in failed if c.cuda]
    if cuda and not any(c.status == "restart" and cuda[-1].seq < c.seq < last.seq for c in records):
        last = cuda[-1]
    if not last.cuda and (not last.error or "CUDA error" not in last.error):
        return last
    since = max((c.seq for c in records if c.status == "restart" and c.seq < last.seq), default=0)
    return next(c for c in failed if c.seq > since and c.error == last.error)


def module_names(candidates: Iterable[CellRecord]) -> set[str]:
    """Names bound by imports and never assigned: a method call on them (``np.zeros``) changes nothing."""
    imported: set[str] = set()
    assigned: set[str] = set()
    for record in candidates:
        imported |= record.names.imported
        assigned |= record.names.defined - record.names.imported
    return imported - assigned


def _minimal(target: CellRecord, candidates: list[CellRecord]) -> tuple[list[PlanStep], set[str], list[PlanStep]]:
    """Backward slice from the target. Globals read inside kept functions are read when the target calls them,
    so they join the target's own needs and the slice is taken again until nothing new turns up."""
    modules, binders = module_names(candidates), _binders(candidates)
    earlier = [c for c in candidates if c.seq < target.seq]
    at_target = set(target.names.used) | target.names.mutated
    while True:
        chosen, needed = _slice(at_target, earlier, modules, binders)
        deferred = set().union(*(step.record.names.deferred for step in chosen)) if chosen else set()
        if deferred <= at_target:
            break
        at_target |= deferred
    chosen_seqs = {step.record.seq for step in chosen}
    skipped = [PlanStep(c, f"not needed by {target.label}") for c in earlier if c.seq not in chosen_seqs]
    later = [PlanStep(c, f"ran after {target.label}") for c in candidates if c.seq > target.seq]
    bound = set().union(*(c.names.defined for c in candidates)) if candidates else set()
    return chosen, {name for name in needed if name not in bound}, skipped + later


def _binders(candidates: Iterable[CellRecord]) -> dict[str, set[str]]:
    """Functions that bind globals (``global x``), by name: a cell calling one binds those names."""
    binders: dict[str, set[str]] = {}
    for record in candidates:
        binders.update(record.names.function_globals)
    return binders


def _slice(
    needed: set[str],
    earlier: list[CellRecord],
    modules: set[str],
    binders: dict[str, set[str]],
    within: set[str] | None = None,
) -> tuple[list[PlanStep], set[str]]:
    """One backward pass. ``binders``: functions that bind globals, so that a cell calling them binds those.
    ``within``: the only names that need building (the rest of a living namespace is right), so a kept cell's
    other reads are not followed, and only cells that bind or change a needed name are kept."""
    needed = set(needed)
    chosen: list[PlanStep] = []
    for record in reversed(earlier):
        names = record.names
        changed = names.mutated - (names.call_mutated & modules)
        called = set().union(*(binders.get(name, set()) for name in names.used - names.defined))
        bound = (names.defined | names.deleted | called) & needed
        if within is not None and not (bound or changed & needed):
            continue
        reason = keep_reason(record, bound, changed & needed)
        if reason is None:
            continue
        chosen.append(PlanStep(record, reason))
        needed -= names.rebound
        needed |= (names.used | changed) if within is None else (names.used | changed) & within
    chosen.reverse()
    return chosen, needed


def keep_reason(record: CellRecord, bound: set[str], changed: set[str]) -> str | None:
    names = record.names
    magics = _magic_names(record)
    parts = []
    if bound:
        parts.append("binds " + _few(bound))
    if changed - bound:
        parts.append("changes " + _few(changed - bound))
    if parts:
        return "; ".join(parts)
    if magics & _PROCESS_MAGICS:
        return "sets up the process (%" + ", %".join(sorted(magics & _PROCESS_MAGICS)) + ")"
    if magics & _OPAQUE_MAGICS or "star_import" in names.side_effects:
        return "may bind any name (star import or %run)"
    if names.syntax_error:
        return f"could not be analysed ({names.syntax_error}); kept to be safe"
    return None


def _few(names: set[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:5]) + (" …" if len(ordered) > 5 else "")


def _find(journal: Journal, counts: Iterable[int]) -> tuple[list[CellRecord], list[int]]:
    found, missing = [], []
    for count in counts:
        record = next((c for c in journal if c.execution_count == count), None)
        (found.append(record) if record is not None else missing.append(count))
    return found, missing


def build_plan(
    journal: Journal,
    mode: str = "minimal",
    target: CellRecord | None = None,
    add: Iterable[int] = (),
    drop: Iterable[int] = (),
    cells: Iterable[int] | None = None,
) -> ReplayPlan:
    """The plan for ``mode``, with the user's changes: ``cells`` replaces it, ``add``/``drop`` edit it.

    Cells are named by execution count, as the frontend shows them (``[3]`` is 3).
    """
    if mode not in MODES:
        raise ValueError(f"replay must be one of {', '.join(MODES)}, not {mode!r}")
    target = target if target is not None else failing_cell(journal)
    plan = ReplayPlan(mode=mode if cells is None else "chosen cells", target=target)
    if mode == "none" and cells is None and not add:
        return plan
    replayable, never = [], []
    for record in journal:
        why = _exclusion(record, target)
        (never.append(PlanStep(record, why)) if why else replayable.append(record))
    if cells is not None:
        wanted, missing = _find(journal, cells)
        chosen_seqs = {c.seq for c in wanted}
        plan.steps = [PlanStep(c, "chosen") for c in replayable if c.seq in chosen_seqs]
        plan.excluded = [PlanStep(c, "not chosen") for c in replayable if c.seq not in chosen_seqs]
        plan.notes += [f"Cell [{n}] is not in the journal." for n in missing]
    elif mode == "minimal" and target is not None:
        plan.steps, plan.unresolved, plan.excluded = _minimal(target, replayable)
    elif mode != "none":
        plan.steps = [PlanStep(c, "ran successfully") for c in replayable]
        if mode == "minimal":
            plan.notes.append("No failing cell is recorded, so the minimal plan is every successful cell.")
    _apply_edits(plan, journal, replayable, add, drop)
    plan.excluded += never
    plan.excluded.sort(key=lambda s: s.record.seq)
    return plan


def rebuild_plan(journal: Journal, names: Iterable[str], target: CellRecord) -> ReplayPlan:
    """The cells that build ``names`` again in the living process, with no restart: after a fast check fired,
    ``target`` (the cell that ran on clamped values) left those names wrong and everything else right. Walking back
    from it, keep each earlier successful cell that binds or changes a wrong name, and follow only the wrong names
    it reads; ``target`` itself is never part of it. ``unresolved``: names no earlier cell binds (``target`` made
    them), which only running ``target`` again rebuilds."""
    wanted = set(names)
    plan = ReplayPlan(mode="rebuild", target=target)
    replayable = [record for record in journal if _exclusion(record, target) is None]
    earlier = [record for record in replayable if record.seq < target.seq]
    plan.steps, needed = _slice(wanted, earlier, module_names(replayable), _binders(replayable), within=wanted)
    bound = set().union(*(record.names.defined for record in earlier)) if earlier else set()
    plan.unresolved = {name for name in needed if name not in bound}
    return plan


def _apply_edits(
    plan: ReplayPlan, journal: Journal, replayable: list[CellRecord], add: Iterable[int], drop: Iterable[int]
) -> None:
    allowed = {c.seq for c in replayable}
    added, missing = _find(journal, add)
    for record in added:
        if record.seq not in allowed:
            plan.notes.append(f"Cell {record.label} cannot be added: {_exclusion(record, plan.target)}.")
        elif record.seq not in {s.record.seq for s in plan.steps}:
            plan.steps.append(PlanStep(record, "added by you"))
            plan.excluded = [s for s in plan.excluded if s.record.seq != record.seq]
    dropped, missing_drop = _find(journal, drop)
    dropped_seqs = {c.seq for c in dropped}
    plan.excluded += [PlanStep(s.record, "dropped by you") for s in plan.steps if s.record.seq in dropped_seqs]
    plan.steps = [s for s in plan.steps if s.record.seq not in dropped_seqs]
    plan.steps.sort(key=lambda s: s.record.seq)
    plan.notes += [f"Cell [{n}] is not in the journal." for n in [*missing, *missing_drop]]
