"""``nb_cudaguard.restart()``: restart the kernel in place (same PID, connection file and ports) and rebuild the
session in the new process.

A device-side assert poisons the CUDA context until the process ends, so recovery needs a new process. Asking the
frontend for a restart needs frontend code (and each frontend differs); killing the process shows a crash dialog.
An ``exec`` of the kernel's own command line keeps the PID, which is all a kernel manager watches, so no frontend
notices anything but a short pause. In order:

1. the request that asked for the restart is answered first: the exec is scheduled on the kernel's event loop and
   waits until the reply and the ``idle`` status of that request have gone out;
2. shell requests that arrive meanwhile are not run: they are kept, with their signatures, and so are those still
   waiting in the shell socket when it stops being read; they go into the handoff and the new process runs them
   after the replay, in their original order, replying to their original client;
3. the handoff's space is reserved on disk: a full or unwritable disk calls the restart off here, while nothing
   is closed yet (the kept requests run in this process, and the restart cell and the next cell say why). Then
   the shell stops reading (the point of no return), children end, fds 1/2 are restored, the channels are flushed
   and closed, the handoff (plan, journal, options, requests) is written into the reserved space, so that a disk
   that filled meanwhile cannot fail it, every other fd becomes close-on-exec, and the process execs itself with
   ``--ext=nb_cudaguard``;
4. if the exec fails, the process exits instead: a kernel manager with auto-restart (jupyter_server) brings the
   kernel back, a one-shot startup file loads nb_cudaguard there, and the replay happens as after an exec.

Terminal IPython has no requests to keep: the exec happens at once, from inside the cell.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from nb_cudaguard.errors import NbCudaguardError
from nb_cudaguard.relaunch import reexec
from nb_cudaguard.relaunch.handoff_content import RestartOptions
from nb_cudaguard.relaunch.kernel_restart import KernelRestart
from nb_cudaguard.relaunch.preparation import (
    LATE_BYTES,
    announce,
    discard_written,
    handoff_for,
    mark_restart_cell,
    user_names,
)
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay import handoff
from nb_cudaguard.replay.plan import MODES, ReplayPlan, account_names, build_plan


class RestartError(NbCudaguardError, RuntimeError):
    """The restart could not start; the session is unchanged.

    IPython shows it as its one message, not as a traceback through nb_cudaguard's modules: what the user needs
    is why, and what to do instead."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def restart(
    guard: CudaGuardState,
    replay: str = "minimal",
    diagnose: bool = False,
    cells: Iterable[int] | None = None,
    add: Iterable[int] = (),
    drop: Iterable[int] = (),
    *,
    method: str = "exec",
    carry: bool | None = None,
    carry_names: Iterable[str] = (),
    no_carry: Iterable[str] = (),
    replay_cells: Iterable[int] = (),
) -> ReplayPlan:
    """Restart this kernel in place and replay the recorded cells the failing cell needs.

    ``replay``: "minimal" (cells that rebuild what the failing cell reads), "all" (every successful cell) or
    "none". ``cells``/``add``/``drop``: execution counts that replace or edit that plan. ``diagnose``: after the
    replay, run the failing cell again under ``%%cudacheck``. ``method="exit"`` skips the exec and lets the kernel
    manager's auto-restart bring the kernel back (for platforms without exec). Returns the plan; the restart itself
    happens just after the calling cell has finished.

    ``carry`` (default ``CudaGuard.carry``): values that live on the CPU are pickled now and restored in the new
    process, and the cells that built them are skipped where that is faster (see ``carry.plan``).
    ``carry_names``/``no_carry``: names to carry or not whatever the plan prefers; ``replay_cells``: execution
    counts of cells to replay even though their values could be carried.
    """
    shell = guard.shell
    if replay not in MODES:
        raise RestartError(f"replay must be one of {', '.join(MODES)}, not {replay!r}")
    if method not in ("exec", "exit"):
        raise RestartError(f"method must be 'exec' or 'exit', not {method!r}")
    if guard.restarting:
        raise RestartError("nb_cudaguard: a restart is already under way.")
    plan = build_plan(guard.journal, replay, add=add, drop=drop, cells=list(cells) if cells is not None else None)
    account_names(plan, guard.journal, user_names(shell))
    manifest = None
    if (guard.carry if carry is None else carry) and plan.steps and plan.target is not None:
        from nb_cudaguard.carry.files import prepare

        try:
            loose = _loose(guard, plan)
            plan, manifest, carry_plan = prepare(shell, guard, plan, carry_names, no_carry, replay_cells, loose)
        except (OSError, NbCudaguardError) as exc:
            discard_written(handoff.binding_for(shell))
            raise RestartError(
                f"nb_cudaguard: the restart was not started, because the values to carry could not be written "
                f"({exc}). Nothing changed; `%cudaguard restart --no-carry` restarts without carrying them."
            ) from None
        if manifest is not None:
            print(carry_plan.to_text(), flush=True)
    snapshot = _snapshot_manifest(guard, plan)
    options = RestartOptions(replay=replay, diagnose=bool(diagnose), method=method, carry=manifest, snapshot=snapshot)
    if getattr(getattr(shell, "kernel", None), "session", None) is not None:
        KernelRestart(guard, plan, options).arm()
    elif type(shell).__name__ == "TerminalInteractiveShell":
        _restart_terminal(guard, plan, options)
    else:
        kind = type(shell).__name__
        raise RestartError(f"nb_cudaguard cannot restart a {kind}: only ipykernel kernels and terminal IPython.")
    return plan


def _loose(guard: CudaGuardState, plan: ReplayPlan) -> dict[str, int]:
    """The names only the training cells the snapshot will replace bound (``snapshot.plan.only_bound_by``)."""
    if not guard.snapshot:
        return {}
    from nb_cudaguard.snapshot.plan import only_bound_by

    return only_bound_by(plan, guard.journal, guard.snapshots, user_names(guard.shell))


def _snapshot_manifest(guard: CudaGuardState, plan: ReplayPlan):
    """Write the GPU state's snapshot for the new process, if it lets the replay skip training cells; a snapshot
    that cannot be written only means those cells are replayed (said in one line)."""
    if not (guard.snapshot and plan.steps and plan.target is not None):
        return None
    from nb_cudaguard.snapshot.files import prepare as prepare_snapshot

    try:
        decided, manifest = prepare_snapshot(guard.shell, guard.journal, guard.snapshots, plan)
    except (OSError, RuntimeError, NbCudaguardError) as exc:
        print(f"nb_cudaguard: the snapshot is not used ({exc}); the training cells are replayed.", flush=True)
        return None
    text = decided.to_text()
    if text:
        print(text, flush=True)
    return manifest


def _restart_terminal(guard: CudaGuardState, plan: ReplayPlan, options: RestartOptions) -> None:
    """As in a kernel, the handoff's space is reserved before anything is ended: a full disk or a private directory
    that is not private calls the restart off in one line, and this IPython goes on as it was."""
    shell = guard.shell
    binding = handoff.binding_for(shell, create_secret=True)
    count = _next_count(shell)

    def content(children: tuple[str, ...]) -> dict:
        made = handoff_for(guard, plan, options, how="exec", children_ended=children, execution_count=count)
        return made.to_document()

    try:
        reserved = handoff.reserve(binding, content(()), LATE_BYTES)
    except (OSError, handoff.HandoffError) as exc:
        discard_written(binding)
        raise RestartError(
            f"nb_cudaguard: the restart did not start ({type(exc).__name__}: {exc}); this IPython goes on as it was."
        ) from None
    mark_restart_cell(guard.current_cell)
    path = handoff.write(binding, content(tuple(reexec.end_children())), reserved)
    print(announce(plan, "IPython"), flush=True)
    try:
        shell.history_manager.end_session()
    except Exception:
        pass
    guard.unregister()
    os.environ[handoff.ENV_PATH] = str(path)
    reexec.mark_fds_cloexec()
    try:
        reexec.exec_self(reexec.exec_argv())
    except OSError as exc:
        handoff.remove(path)
        discard_written(binding)
        os.environ.pop(handoff.ENV_PATH, None)
        guard.register()
        raise RestartError(f"nb_cudaguard: the exec failed ({exc}); this IPython keeps running unchanged.") from exc


def _next_count(shell) -> int:
    """The number of the cell after this one, from inside this one: IPython 9 moves its counter before a cell
    runs, earlier versions after it, but every version stores the running cell in the history under its number
    first."""
    stored = len(getattr(shell.history_manager, "input_hist_raw", ()))  # entry 0 is a placeholder
    return max(shell.execution_count, stored)
