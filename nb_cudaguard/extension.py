"""The object that lives in the shell while the extension is loaded: hooks, journal, capture, last report.

On the success path a cell costs one journal append and, where the fd route is used, two ``dup2`` calls. The
probe, the parsing and the diagnosis run only after a cell failed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from traitlets import Bool, Enum, Float, Int, observe
from traitlets.config import Configurable

from nb_cudaguard.check.magics import EveryCell
from nb_cudaguard.diagnosis.reported import reported
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.incident import compact
from nb_cudaguard.incident.incident import Incident, build_incident
from nb_cudaguard.incident.usercode import cell_filenames, note_cell
from nb_cudaguard.record.capture import OutputCapture
from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.record.observe import Observer
from nb_cudaguard.relaunch.handoff_content import SessionState
from nb_cudaguard.snapshot.store import Snapshots

if TYPE_CHECKING:
    from IPython.core.magic import Magics

    from nb_cudaguard.diagnosis.causes import Diagnosis
    from nb_cudaguard.diagnosis.checked import ReadByChecks
    from nb_cudaguard.panel.report import Report
    from nb_cudaguard.panel.rerun import FiredCell
    from nb_cudaguard.relaunch.outcome import ReplayOutcome


class CudaGuard(Configurable):
    """nb_cudaguard's options: ``%config CudaGuard.<option> = value`` or ``c.CudaGuard.<option>`` in a config."""

    capture_output = Bool(
        True, help="Tee each cell's fd-level stdout/stderr into a bounded buffer to catch device assertions."
    ).tag(config=True)
    capture_limit = Int(64 * 1024, help="Characters of each cell's output kept for the report.").tag(config=True)
    assertion_lines_shown = Int(
        3,
        help="Device assertion lines a cell shows in the notebook; one line stands for the rest, which the report "
        "counts (0: show them all). A GPU prints one per failing thread, often hundreds.",
    ).tag(config=True)
    journal_max_cells = Int(5000, help="Cells kept in the journal; the oldest are dropped first.").tag(config=True)
    journal_max_bytes = Int(32 * 1024 * 1024, help="Bytes of cell source kept in the journal.").tag(config=True)
    show_report = Enum(
        ["auto", "always", "never"],
        "auto",
        help="After a failing cell: 'auto' shows the report for CUDA and tensor-index errors only.",
    ).tag(config=True)
    carry = Bool(
        True, help="On restart, carry values that live on the CPU across it instead of replaying their cells."
    ).tag(config=True)
    carry_max_bytes = Int(8 * 1024**3, help="Bytes of pickled values a restart may carry, in all.").tag(config=True)
    carry_max_seconds = Float(60.0, help="Seconds one value may take to pickle before it is replayed instead.").tag(
        config=True
    )
    panel = Bool(
        True, help="After a failure, show the interactive panel where widgets can render (else the plain report)."
    ).tag(config=True)
    # --- snapshots of the GPU state at cell boundaries (snapshot/), restored by a restart instead of training again
    snapshot = Bool(
        True, help="After a cell that changed models, optimizers or CUDA tensors, keep a host copy for the restart."
    ).tag(config=True)
    snapshot_max_bytes = Int(16 * 1024**3, help="Bytes of host memory the snapshot may take.").tag(config=True)
    snapshot_max_fraction = Float(
        0.03, help="A snapshot is taken when its copy costs at most this share of the cells it protects."
    ).tag(config=True)
    # --- end of the snapshot options

    def __init__(self, shell, **kwargs) -> None:
        super().__init__(parent=shell, **kwargs)
        self.shell = shell
        self.journal = Journal(self.journal_max_cells, self.journal_max_bytes)
        self.capture = OutputCapture(self.capture_limit, self.assertion_lines_shown) if self.capture_output else None
        self.incidents: list[Incident] = []
        self.last_report: Report | None = None
        self.read_by_checks: ReadByChecks | None = None  # what checks read, for the later reports of their cells
        # the report of the failure that poisoned this process's context: a poisoned context stays poisoned until
        # the process ends, so every later CUDA failure in it is that failure's sticky error, reported as its own
        self.poisoned_by: Report | None = None
        # the restart's state (restart/): one under way, how many this session had, why the last one failed, and
        # what the last replay did
        self.restarting = False
        self.restarts = 0
        self.restart_failure: str | None = None
        self.last_replay: ReplayOutcome | None = None
        # the last panel drawn or reopened after a restart: whichever way a restart is asked, it is handed over, so
        # that it shows the outcome and its buttons keep working in the new process
        self.live_panel: Any = None
        # every panel this process drew or reopened: each becomes its static twin when the kernel goes for good
        # (a frontend's Restart or Shut down) or the extension unloads (panel.static)
        self.panels: list[Any] = []
        self._unfollow_exit: Any = None
        # the magics registered for this session, removed again on unload
        self.magics: list[Magics] = []
        # %cudaguard check on|off: the checks around every cell, shared with %%cudacheck
        self.every_cell = EveryCell(shell, rebuilds=self._rebuild_cells, fired=self._fired_before_error)
        # the last cell whose fast check fired: what %cudaguard rerun and the buttons under its error act on
        self.last_fired: FiredCell | None = None
        self._current: CellRecord | None = None
        self._started = 0.0
        # the simulated GPU was on before the extension loaded: unloading it leaves it on, else turns it off
        self._simulating_at_load = _simulating()
        # record/observe: what each cell changed, seen by the runtime (it also counts the optimizers' steps)
        self.observer = Observer()
        self.snapshots = Snapshots(self.observer.steps)  # snapshot/: the GPU state's last host copy

    @property
    def current_cell(self) -> CellRecord | None:
        """The journal record of the cell running now (None between cells)."""
        return self._current

    @observe("capture_limit", "assertion_lines_shown")
    def _capture_changed(self, change) -> None:
        capture = getattr(self, "capture", None)  # config given at construction arrives before capture exists
        if capture is not None:
            capture.limit = self.capture_limit
            capture.keep_assertions(self.assertion_lines_shown)

    # --- lifecycle
    def register(self) -> None:
        if self.capture is not None:
            self.capture.attach()
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        if self not in self.shell.configurables:
            self.shell.configurables.append(self)
        compact.install(self.shell)  # a CUDA error's traceback: the user's frames, the full one folded
        from nb_cudaguard.panel.static import follow_kernel_exit

        self._unfollow_exit = follow_kernel_exit(self)

    def unregister(self) -> None:
        if self.restarting:  # the last step before the exec
            self._hand_over_panel()
        if self._unfollow_exit is not None:  # an in-place restart keeps the panels live: not for it
            self._unfollow_exit()
            self._unfollow_exit = None
        compact.uninstall(self.shell)
        for name, hook in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(name, hook)
            except ValueError:
                pass
        if self.capture is not None:
            self.capture.detach()
        if self in self.shell.configurables:
            self.shell.configurables.remove(self)

    def _hand_over_panel(self) -> None:
        """For a restart the panel did not ask for (``%cudaguard restart``, ``nb_cudaguard.restart()``)."""
        import os

        from nb_cudaguard.panel.handover import ENV

        if self.live_panel is None or ENV in os.environ:  # none, or the panel that asked left its own
            return
        try:
            self.live_panel.handover().to_env()
        except Exception as exc:  # the restart matters more than the old panel
            print(f"nb_cudaguard: the panel will not follow the restart ({type(exc).__name__}: {exc})", file=sys.stderr)

    def close(self) -> None:
        """``%unload_ext``: nothing of the extension stays on. The every-cell checks stop, and the simulated GPU
        stops if it was turned on in this session (``%cudaguard simulate on``, or carried across a restart). The
        panels become their static twins: their buttons would act on an extension that is gone."""
        from nb_cudaguard.panel.static import go_static

        go_static(self)
        self.unregister()
        self.every_cell.set(False)
        self.observer.close()
        if _simulating() and not self._simulating_at_load:
            from nb_cudaguard import testing

            testing.disable()

    # --- the state a restart carries
    def session_state(self) -> SessionState:
        """What the replay cannot rebuild, since it never replays the extension's own commands."""
        config = {
            name: getattr(self, name)
            for name, trait in self.traits(config=True).items()
            if getattr(self, name) != trait.default_value
        }
        report = self.last_report
        if report is not None and report.origin is not None:  # a sticky error's: the restart is for its origin
            report = report.origin
        carried = json.loads(report.to_json()) if report is not None else None
        return SessionState(_simulating(), self.every_cell.enabled, self.every_cell.sync, config, carried)

    def restore_session(self, state: SessionState) -> list[str]:
        """Set the carried state in the new process, before the replay; returns what could not be set, one line
        each (an option this version does not have, a value it refuses)."""
        problems = []
        for name, value in state.config.items():
            if not self.has_trait(name) or not self.trait_metadata(name, "config"):
                problems.append(f"CudaGuard.{name} is no option of this nb_cudaguard")
                continue
            try:
                setattr(self, name, value)
            except Exception as exc:
                problems.append(f"CudaGuard.{name} = {value!r} was refused ({exc})")
        if state.report is not None:
            from nb_cudaguard.panel.report import Report

            try:
                report = Report.from_dict(state.report)
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(f"the report of the failure before the restart could not be read ({exc})")
            else:
                report.restarted = True
                self.last_report = report
        if state.simulate:
            from nb_cudaguard import testing

            testing.enable()
        if state.check:
            self.every_cell.set(True, sync=state.check_sync)
        return problems

    def pin_report(self, diagnosis: Diagnosis, error: BaseException, cell: CellRecord) -> str | None:
        """After "Restart, replay & diagnose": the failing cell re-run under ``%%cudacheck`` read the values, so
        its diagnosis replaces the ranking in the report carried across the restart (``%cudaguard report``, the
        JSON that ``nb-cudaguard run`` writes, the panel's buttons). Without a carried report, the check's error
        is the report's incident. Returns what the report says first (what is wrong, then "Fix: ..."), for the
        replay's outcome to say as the panel does; None without a cause."""
        from nb_cudaguard.incident.incident import build_incident
        from nb_cudaguard.panel.report import Report

        carried = self.last_report if self.last_report is not None and self.last_report.restarted else None
        checked = Report(build_incident(error, namespace=self.shell.user_ns), diagnosis)  # names the user's values
        incident = carried.incident if carried is not None else checked.incident
        how = f"Pinned by re-running {cell.label} under %%cudacheck after the restart: the causes below were read."
        self.last_report = Report(incident, diagnosis, restarted=carried is not None, pinned=how, owner=checked.owner)
        headline = checked.content().headline
        return f"{headline.problem}\nFix: {headline.fix}" if headline is not None else None

    # --- hooks
    def pre_run_cell(self, info=None) -> None:
        source = getattr(info, "raw_cell", "") or ""
        note_cell(self.shell, source, self.shell.execution_count)
        self._current = self.journal.start(source, self.shell.execution_count, getattr(info, "cell_id", None))
        self._observe(self.observer.before, source, self.shell.user_ns)
        if self.capture is not None:
            self.capture.begin_cell()
        if self.snapshot:
            self._snapshot_hook(self.snapshots.before_cell)
        self._started = time.perf_counter()

    def post_run_cell(self, result) -> None:
        record = self._current
        if record is None:  # loaded from inside a cell: that cell started before our hooks existed
            return
        self._current = None
        record.duration = time.perf_counter() - self._started
        if getattr(result, "execution_count", None) is not None:  # IPython 9 counts before pre_run_cell
            record.execution_count = result.execution_count
        error = result.error_in_exec or result.error_before_exec
        if error is None:
            record.status = "ok"
        elif isinstance(error, KeyboardInterrupt):
            record.status = "interrupted"
        elif isinstance(error, UsageError):  # a mistyped magic: it changed nothing, so it is no incident either
            record.status = "usage"
        else:
            record.status = "error"
            record.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        output = self.capture.end_cell(failed=error is not None) if self.capture is not None else None
        record.observed = self._observe(self.observer.after, self.shell.user_ns, self.shell.user_ns_hidden)
        if record.status == "ok" and self.snapshot:
            self._snapshot_hook(self.snapshots.after_cell, record, self.shell.user_ns, self.shell.user_ns_hidden,
                                self.snapshot_max_bytes, self.snapshot_max_fraction)  # fmt: skip
        if result.error_in_exec is None or record.status != "error":
            return
        try:
            self._explain(result.error_in_exec, record, output)
        except Exception as exc:  # the report must never be what breaks the user's session
            print(f"nb_cudaguard: could not build the report ({type(exc).__name__}: {exc})", file=sys.stderr)

    def _explain(self, error: BaseException, record: CellRecord, output) -> None:
        record.transformed = self.shell.transform_cell(record.source) if record.source else record.source
        incident = build_incident(
            error,
            output_tail=output.text if output else "",
            assertions=output.assertions if output else [],
            cell=record,
            cell_filenames=dict(cell_filenames(self.shell)),
            namespace=self.shell.user_ns,
        )
        from nb_cudaguard.diagnosis import checked, diagnose  # the diagnosis and report: only after a failure
        from nb_cudaguard.panel.report import Report

        origin = self.poisoned_by
        if origin is not None and incident.is_cuda:
            # the sticky error of a context an earlier cell poisoned: the same incident, reported as that cell's
            report = Report(incident, origin.diagnosis, origin=origin)
        else:
            self.read_by_checks = self.read_by_checks or checked.ReadByChecks()
            report = Report(incident, self.read_by_checks.after(incident, diagnose(incident, journal=self.journal)))
            record.cuda = incident.is_cuda  # the failure a restart rebuilds for (replay.plan.failing_cell)
            if incident.classification == "poisoned":
                self.poisoned_by = report
        if reported(
            report.incident, report.diagnosis
        ):  # a typo is no incident: it neither replaces the report nor gets one
            self.incidents = [*self.incidents[-9:], incident]
            self.last_report = report
        if self._should_show(report):
            self.show(report)
        fast = sys.modules.get("nb_cudaguard.check.fast.error")  # loaded if a fast check can have fired
        if fast is not None and isinstance(error, fast.FastCheckError):
            self._offer_choices(record, error)

    def _offer_choices(self, record: CellRecord, error) -> None:
        """A fast check fired: remember the cell for ``%cudaguard rerun``, and put its buttons under the error."""
        from nb_cudaguard.panel.rerun import FiredCell

        self.last_fired = FiredCell(record, error)
        if record.observed is not None:  # what it changed, seen: the buttons and %cudaguard rerun act on it all
            error.changed_names = self.last_fired.corrupted(self.shell.user_ns)
        if self.panel:
            from nb_cudaguard.panel.fired import show_choices

            show_choices(self, self.last_fired)

    def _fired_before_error(self, error: BaseException) -> None:
        """A fast check fired in a cell that then raised its own error: the choices of one firing at the cell's end."""
        if (record := self.journal.last) is not None:
            self._offer_choices(record, error)

    def _rebuild_cells(self, names: list[str]) -> list[tuple[str, list[str]]]:
        """For a fired fast check's error, at the end of the running cell: the cells that rebuild ``names``."""
        from nb_cudaguard.panel.rerun import rebuild_cells

        return rebuild_cells(self.journal, names, self._current)

    def _should_show(self, report: Report) -> bool:
        if self.show_report != "auto":
            return self.show_report == "always"
        if isinstance(report.incident.exception, CudaCheckError):
            return False  # its message is already the whole explanation; %cudaguard report still has it
        return reported(report.incident, report.diagnosis)

    def show(self, report: Report) -> None:
        from IPython.display import display

        if self.panel:
            from nb_cudaguard.panel.widget import show_panel

            try:
                show_panel(report, self)
                return
            except Exception as exc:
                print(f"nb_cudaguard: no panel ({type(exc).__name__}: {exc}); the plain report:", file=sys.stderr)
        display(report)

    def status(self) -> str:
        lines = [
            f"nb_cudaguard: {len(self.journal)} cells recorded ({self.journal.dropped} dropped by the cap)",
            f"  capture: {self.capture.status() if self.capture else 'off (CudaGuard.capture_output = False)'}",
            f"  CUDA incidents: {sum(incident.is_cuda for incident in self.incidents)}",
        ]
        if self.last_report is not None:
            inc = self.last_report.incident
            lines.append(f"  last: {inc.classification} - {inc.exc_type}: {inc.message.splitlines()[0][:100]}")
        lines.append(f"  snapshot: {self.snapshots.status() if self.snapshot else 'off (CudaGuard.snapshot = False)'}")
        return "\n".join(lines)

    def _observe(self, step, *args) -> Any:
        """Observing must never break the user's session: a failure leaves the cell to the source analysis."""
        try:
            return step(*args)
        except Exception as exc:
            print(f"nb_cudaguard: could not observe the cell ({type(exc).__name__}: {exc})", file=sys.stderr)
            return None

    def _snapshot_hook(self, hook, *args) -> None:
        """A snapshot must never be what breaks the user's session: a failure turns it off, with one line."""
        try:
            hook(*args)
        except Exception as exc:
            self.snapshot = False
            print(f"nb_cudaguard: snapshots are off ({type(exc).__name__}: {exc})", file=sys.stderr)


def _simulating() -> bool:
    """Is the simulated GPU on? Read without importing it (it imports torch)."""
    testing = sys.modules.get("nb_cudaguard.testing")
    return testing is not None and bool(testing.is_enabled())
