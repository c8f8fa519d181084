"""The panel across its own restart: the process that drew it is gone, but the browser still shows it.

An in-place restart keeps the kernel's connection (same ports, same PID), so the frontend keeps the panel's widget
models and their comm ids. Before the exec, the panel leaves those ids in its hand-over (``panel.handover``); the
new process reopens comms with the same ids, without announcing them, which makes the old panel live again: its
status line shows the replay's progress and result, and "Copy report" works again. The restart buttons stay
disabled: the context they were for is gone.

Messages published before a frontend has reconnected are dropped, so nothing is sent until a client has
subscribed to iopub again (ipykernel 7 says so with its welcome message; on ipykernel 6 a TCP connection to the
iopub port is the sign) or a second has passed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from nb_cudaguard.panel.controls import copy_report, status_html
from nb_cudaguard.panel.handover import HandoverError, PanelHandover
from nb_cudaguard.relaunch.kernel_internals import clients_are_back
from nb_cudaguard.relaunch.resume import show_at_next_cell
from nb_cudaguard.relaunch.session_state import CudaGuardState

CLIENT_WAIT = 1.0
POLL = 0.1


def reattach_after_restart(shell, guard: CudaGuardState) -> None:
    """Called when the extension loads: if a panel asked for this restart, follow the replay in it."""
    try:
        handover = PanelHandover.from_env()
    except HandoverError as exc:
        _refused(
            shell,
            f"nb_cudaguard: the panel cannot follow the replay: {exc}. %cudaguard replay --report shows what ran.",
        )
        return
    outcome = guard.last_replay
    if handover is None or outcome is None or getattr(shell, "kernel", None) is None:
        return
    follower = _Follower(handover, outcome, shell.kernel)
    threading.Thread(target=follower.run, name="nb_cudaguard-panel", daemon=True).start()


def _refused(shell, message: str) -> None:
    """In the kernel's log, and at the start of the user's next cell: the old panel itself cannot be reached."""
    log = getattr(getattr(shell, "kernel", None), "log", None)
    if log is not None:
        log.warning(message)
    show_at_next_cell(shell, lambda: message)


def _secondary_comm(comm_id: str, kernel):
    """A kernel-side end for a comm the frontend already has: registered to receive, never announced.

    A comm learns its kernel when it first publishes, and ipywidgets sends nothing through a comm without one, so
    the kernel is set here (an announced comm gets it from its ``comm_open``).
    """
    try:
        import comm as comm_package
    except ImportError:  # ipykernel 6 without the comm package
        from ipykernel.comm import Comm

        old_channel = Comm(comm_id=comm_id, primary=False, target_name="jupyter.widget", kernel=kernel)
        kernel.comm_manager.register_comm(old_channel)
        return old_channel
    channel = comm_package.create_comm(comm_id=comm_id, primary=False, target_name="jupyter.widget")
    channel.kernel = kernel  # type: ignore[attr-defined]  # ipykernel's comm class has it; the base declares none
    comm_package.get_comm_manager().register_comm(channel)
    return channel


class _Follower:
    def __init__(self, handover: PanelHandover, outcome, kernel) -> None:
        self.handover = handover
        self.outcome = outcome
        self.kernel = kernel

    def run(self) -> None:
        try:
            self._follow()
        except Exception as exc:  # a thread's exception would go to the kernel's stderr, which nobody reads
            self.kernel.log.warning(
                "nb_cudaguard: the panel could not follow the replay (%s: %s)", type(exc).__name__, exc
            )

    def _follow(self) -> None:
        deadline = time.monotonic() + CLIENT_WAIT
        while not clients_are_back(self.kernel) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # a subscription follows its connection
        widgets = self._attach()

        status = widgets["status"]
        shown = None
        while True:
            done = self.outcome.done
            message, tone = self._progress()
            if message != shown:
                status.value = status_html(message, tone)
                shown = message
            if done:
                break
            time.sleep(POLL)
        copy = widgets.get("copy")
        if copy is not None:
            markdown = self.handover.markdown
            copy.on_click(lambda _: copy_report(markdown, widgets["copy_area"], widgets["output"]))
            copy.disabled = False

    def _attach(self) -> dict[str, Any]:
        import ipywidgets as w

        handover = self.handover
        found = {
            "status": w.HTML(comm=_secondary_comm(handover.status, self.kernel)),
            "output": w.Output(comm=_secondary_comm(handover.output, self.kernel)),
            "copy_area": w.Textarea(comm=_secondary_comm(handover.copy_area, self.kernel)),
        }
        for key, button in handover.buttons.items():
            found[key] = w.Button(
                comm=_secondary_comm(button.model_id, self.kernel),
                description=button.description,
                button_style=button.button_style,
                icon=button.icon,
                disabled=True,
            )
        return found

    def _progress(self) -> tuple[str, str]:
        outcome = self.outcome
        steps = outcome.plan.steps
        if outcome.done:
            if outcome.failed is not None:
                return outcome.summary() + ". %cudaguard replay --report shows what ran.", "error"
            return outcome.summary() + ". Your variables are back: fix the failing cell and run it.", "ok"
        done = len(outcome.ran)
        if done < len(steps):
            record = steps[done].record
            return (
                f"Restarted in place (PID {outcome.pid}). Replaying {done + 1}/{len(steps)}: {record.label} "
                f"{record.first_line[:60]}…",
                "busy",
            )
        return f"Restarted in place (PID {outcome.pid}). Replayed {done} cell(s); finishing…", "busy"
