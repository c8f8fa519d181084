"""What every in-place restart prepares before the exec, for a kernel and for terminal IPython alike."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.relaunch.handoff_content import Handoff, RestartOptions
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay.handoff import Binding
from nb_cudaguard.replay.plan import ReplayPlan

RESTART_STATUS = "restart"
# Room reserved for what the handoff gains after the point of no return: the requests that arrive while the kernel
# stops reading (a cell's request is a few kB) and the children it ends.
LATE_BYTES = 1024 * 1024


def discard_written(binding: Binding) -> None:
    """The restart is called off: what it wrote for the new process (carried values, the snapshot) is removed,
    since no process will ever read it."""
    from nb_cudaguard.carry.files import discard_all
    from nb_cudaguard.snapshot.files import discard as discard_snapshot

    discard_all(binding)
    discard_snapshot(binding)


def handoff_for(guard: CudaGuardState, plan: ReplayPlan, options: RestartOptions, **fields: Any) -> Handoff:
    """The handoff of this restart; ``fields`` are what only the caller knows (how, requests, display)."""
    return Handoff(
        plan=plan.to_dict(),
        journal=fields.pop("journal", None) or guard.journal.to_json(),
        options=options,
        pid=os.getpid(),
        execution_count=fields.pop("execution_count", None) or guard.shell.execution_count,
        restarts=guard.restarts + 1,
        requested_at=fields.pop("requested_at", None) or time.time(),
        session=guard.session_state(),
        **fields,
    )


def user_names(shell) -> list[str]:
    """The user's names: what a restart must account for, and what the outcome lists as existing again."""
    hidden = getattr(shell, "user_ns_hidden", {})
    return sorted(n for n in shell.user_ns if not n.startswith("_") and n not in hidden and n not in ("In", "Out"))


def announce(plan: ReplayPlan, how: str) -> str:
    if plan.steps:
        what = f"then replaying {len(plan.steps)} cell(s) ({plan.mode}, {plan.recorded_seconds:.1f} s as recorded)"
    else:
        what = "with no replay"
    return f"nb_cudaguard: restarting {how} in place, {what}."


def mark_restart_cell(record: CellRecord | None) -> None:
    """The cell that asked for the restart must never be replayed (it would restart again)."""
    if record is not None:
        record.status = RESTART_STATUS


def write_startup_file(shell, slug: str) -> Path | None:
    """A kernel relaunched by its manager uses the kernelspec's argv, so ``--ext`` cannot ride along: a startup
    file in the profile loads nb_cudaguard there. Every kernel of the profile runs every such file, so each is named
    after its own kernel (two kernels of one profile restarting at once keep one file each), and it acts (and
    deletes itself) only in the kernel that the handoff is bound to."""
    startup_dir = getattr(getattr(shell, "profile_dir", None), "startup_dir", None)
    if not startup_dir:
        return None
    path = Path(startup_dir) / f"00-nb_cudaguard-resume-{slug}.py"
    path.write_text(
        "# Written by nb_cudaguard for the replay after one kernel restart; that kernel deletes it.\n"
        "try:\n"
        "    from nb_cudaguard.relaunch.resume import load_after_exit as _nb_cudaguard_load\n"
        f"    _nb_cudaguard_load(get_ipython(), {str(path)!r})\n"
        "    del _nb_cudaguard_load\n"
        "except ImportError:\n"
        "    pass\n",
        encoding="utf-8",
    )
    return path
