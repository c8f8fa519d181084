"""The new process's side of a restart: take the handoff, carry the journal over, replay, then run the requests
that arrived during the restart, and tell the user at their next cell.

In a kernel the replay runs as the first thing on the event loop and holds the shell's lock, so every request that
comes in meanwhile waits behind it (a cell run now simply waits for the replay) and runs afterwards, in order.
Output of replayed cells is captured, not shown: the user sees a progress line, a one-line summary at the next
cell, and the full report (what ran, what failed, what state exists) when a cell fails or on
``%cudaguard replay --report``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from nb_cudaguard.record.copies import COPIES
from nb_cudaguard.record.journal import CellRecord, Journal, JournalError
from nb_cudaguard.relaunch import iopub_clients, subshells
from nb_cudaguard.relaunch import kernel_internals as internals
from nb_cudaguard.relaunch.diagnose_after import describe
from nb_cudaguard.relaunch.handoff_content import Handoff, HandoffContentError, pending_requests
from nb_cudaguard.relaunch.outcome import ReplayOutcome
from nb_cudaguard.relaunch.preparation import discard_written, user_names
from nb_cudaguard.relaunch.running import (
    OUTPUT_TAIL,
    KeptRequests,
    captured,
    interruptible,
    numbered,
    tail,
    under_exact_checks,
)
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import ReplayPlan
from nb_cudaguard.snapshot import files as snapshot_files
from nb_cudaguard.snapshot.restore import Restorer

if TYPE_CHECKING:
    from nb_cudaguard.carry.files import CarriedValues


def resume_after_restart(shell, guard: CudaGuardState) -> None:
    """Called whenever the extension loads: if a handoff waits for this process, take it and rebuild."""
    binding = handoff.binding_for(shell)
    announced = os.environ.pop(handoff.ENV_PATH, None)
    os.environ.pop("NB_CUDAGUARD_EXEC_AT", None)
    _remove_what_dead_kernels_left(shell, binding)
    path = handoff.pending(binding) or _announced(announced)
    if path is None:
        discard_written(binding)  # of a restart of this kernel that never wrote its handoff
        if announced:
            guard.restart_failure = f"nb_cudaguard: the restart handoff {announced} is missing; nothing was replayed."
            show_at_next_cell(shell, lambda: guard.restart_failure)
        return
    try:
        document = handoff.consume(binding, path)
    except handoff.HandoffError as exc:
        guard.restart_failure = str(exc)
        discard_written(binding)  # what came with it is never read
        _log(shell, str(exc))
        show_at_next_cell(shell, lambda: guard.restart_failure)
        kernel = getattr(shell, "kernel", None)
        if kernel is not None and isinstance(exc.document, dict):
            from tornado.ioloop import IOLoop

            kept = KeptRequests(kernel, [list(r) for r in pending_requests(exc.document.get("payload", {}))])
            IOLoop.current().add_callback(kept.refuse_first, "The restart handoff was refused (see the kernel log).")
        return
    finally:
        os.environ.pop(handoff.ENV_SECRET, None)
    try:
        content = Handoff.from_document(document)
        journal = Journal.from_json(content.journal, guard.journal_max_cells, guard.journal_max_bytes)
        plan = ReplayPlan.from_dict(content.plan, journal)
    except (HandoffContentError, JournalError, KeyError, TypeError, ValueError) as exc:  # signed by us: a bug
        guard.restart_failure = f"nb_cudaguard: the restart handoff could not be read ({exc}); nothing was replayed."
        _log(shell, guard.restart_failure)
        show_at_next_cell(shell, lambda: guard.restart_failure)
        return
    guard.journal = journal
    guard.restarts = content.restarts
    _mark_restart(journal)
    _restore(shell, guard, content)
    if content.execution_count:
        shell.execution_count = content.execution_count
    _Resume(shell, guard, content, plan).start()


def _mark_restart(journal: Journal) -> None:
    """The restart, in the journal, where no cell asked for it (a panel's button did): a failure after it is a
    new failure, the one the next restart rebuilds for, not a repeat of the one before (``replay.plan``)."""
    last = journal.last
    if last is None or last.status != "restart":
        journal.start("", None).status = "restart"


def _restore(shell, guard: CudaGuardState, content: Handoff) -> None:
    """What the old process had on that no replayed cell turns on again (the plan never replays the extension's own
    commands): the simulated GPU, the every-cell checks and the ``%config`` options, set before the replay; and,
    on ipykernel 7, the subshells its clients had opened, so that their messages are not refused."""
    for problem in guard.restore_session(content.session):
        _log(shell, f"nb_cudaguard: after the restart, {problem}")
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and content.subshells:
        missing = subshells.recreate_subshells(kernel, content.subshells)
        if missing:
            _log(
                shell,
                f"nb_cudaguard: could not reopen subshell(s) {', '.join(missing)}; their clients must open new ones",
            )


def _announced(announced: str | None) -> Path | None:
    """The path the process before the exec announced, where it is not where this process looks (terminal IPython
    whose temporary directory changed): used only inside a private directory of this user."""
    if not announced:
        return None
    path = Path(announced)
    try:
        handoff.private_under(path.parent, create=False)
    except (OSError, handoff.HandoffError):
        return None
    return path if path.name.startswith("handoff-") and os.path.lexists(path) else None


def _remove_what_dead_kernels_left(shell, binding: handoff.Binding) -> None:
    """Handoffs and carried values of kernels that ended in the middle of a restart, in our own directories only."""
    from nb_cudaguard.carry.files import remove_stale_carries

    notes = remove_stale_carries() + snapshot_files.remove_stale()
    for where in (lambda: handoff.handoff_dir(binding, create=False), lambda: handoff.private_dir(create=False)):
        try:
            notes += handoff.remove_stale(where(), binding)
        except (OSError, handoff.HandoffError):  # not there (nothing to clean), or not ours (never touched)
            continue
    for note in notes:
        _log(shell, note)


def load_after_exit(shell, startup_file: str) -> None:
    """Run by the startup file the exit path leaves: load nb_cudaguard (which replays) only in the kernel the
    handoff belongs to, and remove the file there."""
    if handoff.pending(handoff.binding_for(shell)) is None:
        return
    os.unlink(startup_file)
    shell.run_line_magic("load_ext", "nb_cudaguard")


def _log(shell, text: str) -> None:
    log = getattr(getattr(shell, "kernel", None), "log", None)
    if log is not None:
        log.warning(text)
    else:
        print(text, flush=True)


def show_at_next_cell(shell, message) -> None:
    """Print ``message()`` at the start of the user's next cell, once."""

    def show(*_args) -> None:
        shell.events.unregister("pre_run_cell", show)
        text = message()
        if text:
            print(text, flush=True)

    shell.events.register("pre_run_cell", show)


class _Resume:
    def __init__(self, shell, guard: CudaGuardState, content: Handoff, plan: ReplayPlan) -> None:
        self.shell = shell
        self.guard = guard
        self.content = content
        self.kernel = getattr(shell, "kernel", None)
        self.options = content.options
        self.outcome = ReplayOutcome(
            plan,
            how=content.how,
            pid=os.getpid(),
            restarts=guard.restarts,
            children_ended=list(content.children_ended),
        )
        guard.last_replay = self.outcome
        frames = [list(request) for request in content.pending]
        self.requests = KeptRequests(self.kernel, frames) if self.kernel is not None else None
        self.carried: CarriedValues | None = None  # until they are taken
        self.restorer: Restorer | None = None  # the GPU state's snapshot, loaded in place of the training cells
        self.loose: dict[str, tuple[int, object]] = {}  # carried values of the cells the snapshot may replace

    def start(self) -> None:
        if self.options.carry is not None:
            from nb_cudaguard.carry.files import CarriedValues

            self.carried = CarriedValues(self.options.carry)  # starts reading at once
        self.restorer = Restorer.start(self.options.snapshot)  # reads and checks the file on a thread meanwhile
        show_at_next_cell(self.shell, self._next_cell_text)
        if self.kernel is not None:
            from tornado.ioloop import IOLoop

            iopub_clients.clients_back(self.kernel)  # watch for the first welcome from now on
            IOLoop.current().add_callback(self._schedule)
        else:
            self.run_sync()

    def _next_cell_text(self) -> str:
        if self.outcome.in_panel:  # the panel that asked for the restart shows the outcome at its top
            return ""
        text = self.outcome.summary()
        if self.outcome.failed is not None:
            text += "\n" + self.outcome.to_text().split("\n", 1)[1] + "\n(%cudaguard replay --report shows this again)"
        return text

    # --- drivers
    def _schedule(self) -> None:
        self._busy = iopub_clients.BusyUntilDone(self.kernel)
        self._task = internals.run_first(self.kernel, self.run_async)

    async def run_async(self) -> None:
        lock = internals.main_lock(self.kernel)
        async with lock if lock is not None else contextlib.nullcontext():
            started = time.perf_counter()
            try:
                for index, record in enumerate(self._cells(), 1):
                    self._progress(index, record)
                    with numbered(self.shell, record):
                        result, output, seconds = await self._run_async(record.source)
                    if not self._record(record, result, output, seconds):
                        break
                self._finish_replay(started)
                await iopub_clients.wait_for_clients(self.kernel)  # what runs next must not publish into the void
                if self.requests is not None:
                    self.outcome.served = await self.requests.run()
                await iopub_clients.hold_until_subscribed(self.kernel)  # see there
            finally:  # the frontends last heard "busy" (or "starting"): else they show it until the next cell
                self._busy.done()

    def run_sync(self) -> None:
        started = time.perf_counter()
        for index, record in enumerate(self._cells(), 1):
            self._progress(index, record)
            begun = time.perf_counter()
            with captured() as output, numbered(self.shell, record):
                result = self.shell.run_cell(record.source, silent=True)
            if not self._record(record, result, output.text(), time.perf_counter() - begun):
                break
        self._finish_replay(started)

    async def _run_async(self, source: str):
        shell = self.shell
        try:
            transformed, error = shell.transform_cell(source), None
        except Exception:
            transformed, error = source, sys.exc_info()
        begun = time.perf_counter()
        with captured() as output, interruptible():
            if error is None and not shell.should_run_async(source, transformed_cell=transformed):
                result = shell.run_cell(source, silent=True)
            else:
                result = await shell.run_cell_async(
                    source, silent=True, transformed_cell=transformed, preprocessing_exc_tuple=error
                )
        return result, output.text(), time.perf_counter() - begun

    def _cells(self) -> Iterator[CellRecord]:
        """The cells to replay, less the training cells the snapshot replaces (``snapshot.restore``)."""
        restorer, namespace = self.restorer, self.shell.user_ns
        yield from (r for r in self._planned() if restorer is None or not restorer.skip(r, namespace))

    def _planned(self) -> Iterator[CellRecord]:
        """The cells to replay, in order. The carried values, read on a thread meanwhile, go into the namespace
        just before the position of the first cell the carry plan skips; if they cannot be used, the plain plan's
        cells from that position on run instead: nothing runs twice or out of order, nothing is lost."""
        if self.carried is None:
            yield from (step.record for step in self.outcome.plan.steps)
            return
        position = self.carried.first_skipped
        yield from (step.record for step in self.outcome.plan.steps if step.record.seq < position)
        self._take_carried()
        yield from (step.record for step in self.outcome.plan.steps if step.record.seq >= position)

    def _take_carried(self) -> None:
        carried, self.carried = self.carried, None
        if carried is None:  # taken already
            return
        failure = carried.take(self.shell)
        if failure is None:
            self.outcome.carried, self.outcome.carry_note = carried.names, carried.note
            self.loose = carried.loose
            return
        self.outcome.plan = ReplayPlan.from_dict(carried.manifest.base_plan, self.guard.journal)
        position = self.guard.journal.by_seq(carried.first_skipped)
        self.outcome.carry_note = (
            f"carried values not used ({failure}); replaying the cells that built them, from "
            f"{position.label if position is not None else 'there'}"
        )
        _log(self.shell, "nb_cudaguard: " + self.outcome.carry_note)

    # --- bookkeeping
    def _record(self, record: CellRecord, result, output: str, seconds: float) -> bool:
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            self.outcome.ran.append((record, seconds))
            return True
        self.outcome.failed = record
        self.outcome.error = "".join(traceback.format_exception_only(type(error), error)).strip()
        self.outcome.output = output[-OUTPUT_TAIL:]
        return False

    def _finish_replay(self, started: float) -> None:
        """Carried values the replay did not reach (it stopped early), time, names, the optional diagnosis, then
        mark the replay done (the next cell waits for that)."""
        self._take_carried()
        note = self.restorer.conclude(self.outcome.plan, self.shell.user_ns) if self.restorer is not None else ""
        restored = set(self.restorer.skipped) if self.restorer is not None else set()
        for name, (seq, value) in self.loose.items():  # what the cells the snapshot replaced left
            if seq in restored:
                self.shell.user_ns[name] = value
                self.outcome.carried.append(name)
        self.outcome.carry_note = "; ".join(n for n in (self.outcome.carry_note, note) if n) or None
        self.outcome.seconds = time.perf_counter() - started
        self.outcome.names = user_names(self.shell)
        self.outcome.missing = self._missing()
        present = self.outcome.names
        self.outcome.lost = [name for name in self.outcome.plan.brings_back if name not in present]
        if self._should_diagnose():
            self.outcome.diagnosis = self._diagnose()
        self.outcome.waited = max(0.0, time.time() - self.content.requested_at)  # the restart, the replay, the rest
        self.outcome.done = True
        self._progress_done()

    def _should_diagnose(self) -> bool:
        """Only once the failing cell's inputs exist again: otherwise its first missing name is all it would find."""
        outcome = self.outcome
        return (
            self.options.diagnose and outcome.failed is None and outcome.plan.target is not None and not outcome.missing
        )

    def _missing(self) -> list[str]:
        """Names the failing cell reads (before binding them itself) that exist neither in the namespace nor among
        the builtins after the replay: what the replay could not rebuild."""
        import builtins

        target = self.outcome.plan.target
        if target is None:
            return []
        names = target.names
        namespace = self.shell.user_ns
        return sorted(n for n in names.used - names.defined if n not in namespace and not hasattr(builtins, n))

    def _diagnose(self) -> str:
        """Run the failing cell again under ``%%cudacheck``, which checks the inputs of assert-prone ops before
        they launch, so it names the bad values instead of poisoning the GPU again."""
        try:
            import nb_cudaguard.check.mode  # noqa: F401  (the %%cudacheck checks; a separate part of the package)
        except ImportError:
            return "skipped: the %%cudacheck checks (nb_cudaguard.check) are not part of this installation"
        target = self.outcome.plan.target
        if target is None:  # _should_diagnose checked it
            return "skipped: no failing cell to check"
        COPIES.install()  # a silent run has no cell hooks: see its copies to the device (record.copies)
        with captured() as output, interruptible(), numbered(self.shell, target):
            result = self.shell.run_cell(under_exact_checks(target), silent=True)
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return "the failing cell ran without a failure under %%cudacheck" + tail(output.text())
        return describe(
            error, self.shell.user_ns, self.guard.journal, lambda found: self.guard.pin_report(found, error, target)
        )

    # --- what the user sees while it runs
    def _progress(self, index: int, record: CellRecord) -> None:
        total = len(self.outcome.plan.steps)
        self._publish(
            f"nb_cudaguard: replaying {index}/{total}: {record.label} {record.first_line[:60]} "
            f"({record.duration:.2f} s as recorded)"
        )

    def _progress_done(self) -> None:
        self._publish(self.outcome.summary())

    def _publish(self, text: str) -> None:
        if self.kernel is None:
            print(text, flush=True)
            return
        self.kernel.log.info(text)
        if self.content.display_id is not None:
            internals.publish_update(self.kernel, self.content.display_id, text, self.content.parent_header or {})
