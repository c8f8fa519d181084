"""The panel across its own restart: the process that drew it is gone, but the browser still shows it.

An in-place restart keeps the kernel's connection (same ports, same PID), so the frontend keeps the panel's widget
models and their comm ids. Before the exec, the panel writes those ids into an environment variable (an exec
keeps the environment); the new process reopens comms with the same ids, without announcing them, which makes the
old panel live again: its status line shows the replay's progress and result, and "Copy report" works again.
The restart buttons stay disabled: the context they were for is gone.

Messages published before a frontend has reconnected are dropped, so nothing is sent until a client has
subscribed to iopub again (ipykernel 7 says so with its welcome message; on ipykernel 6 a TCP connection to the
iopub port is the sign) or a second has passed.
"""

from __future__ import annotations

import json
import os
import threading
import time

from nb_cudaguard.restart.resume import clients_are_back

ENV = "NB_CUDAGUARD_PANEL"
MARKDOWN_LIMIT = 64 * 1024  # one environment string may hold 128 KiB on Linux
CLIENT_WAIT = 1.0
POLL = 0.1


def hand_over(panel) -> None:
    """Called just before the restart: what the new process needs to find the panel again."""
    state = {
        "status": panel.status.model_id,
        "output": panel.output.model_id,
        "copy_area": panel.copy_area.model_id,
        "buttons": {
            key: {"id": b.model_id, "description": b.description, "button_style": b.button_style, "icon": b.icon}
            for key, b in panel.buttons.items()
        },
        "markdown": panel.markdown[:MARKDOWN_LIMIT],
    }
    os.environ[ENV] = json.dumps(state)


def take_back() -> None:
    """The restart did not start: nothing will look for the panel."""
    os.environ.pop(ENV, None)


def reattach_after_restart(shell, guard) -> None:
    """Called when the extension loads: if a panel asked for this restart, follow the replay in it."""
    raw = os.environ.pop(ENV, None)
    outcome = getattr(guard, "last_replay", None)
    if not raw or outcome is None or getattr(shell, "kernel", None) is None:
        return
    try:
        state = json.loads(raw)
    except ValueError:
        return
    follower = _Follower(state, outcome, shell.kernel)
    threading.Thread(target=follower.run, name="nb_cudaguard-panel", daemon=True).start()


def _secondary_comm(comm_id: str, kernel):
    """A kernel-side end for a comm the frontend already has: registered to receive, never announced.

    A comm learns its kernel when it first publishes, and ipywidgets sends nothing through a comm without one, so
    the kernel is set here (an announced comm gets it from its ``comm_open``).
    """
    try:
        import comm as comm_package
    except ImportError:  # ipykernel 6 without the comm package
        from ipykernel.comm import Comm

        channel = Comm(comm_id=comm_id, primary=False, target_name="jupyter.widget", kernel=kernel)
        kernel.comm_manager.register_comm(channel)
        return channel
    channel = comm_package.create_comm(comm_id=comm_id, primary=False, target_name="jupyter.widget")
    channel.kernel = kernel
    comm_package.get_comm_manager().register_comm(channel)
    return channel


class _Follower:
    def __init__(self, state: dict, outcome, kernel) -> None:
        self.state = state
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
        from nb_cudaguard.panel.widget import copy_report, status_html

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
            markdown = self.state.get("markdown", "")
            copy.on_click(lambda _: copy_report(markdown, widgets["copy_area"], widgets["output"]))
            copy.disabled = False

    def _attach(self) -> dict:
        import ipywidgets as w

        found = {
            "status": w.HTML(comm=_secondary_comm(self.state["status"], self.kernel)),
            "output": w.Output(comm=_secondary_comm(self.state["output"], self.kernel)),
            "copy_area": w.Textarea(comm=_secondary_comm(self.state["copy_area"], self.kernel)),
        }
        for key, spec in self.state.get("buttons", {}).items():
            found[key] = w.Button(
                comm=_secondary_comm(spec["id"], self.kernel),
                description=spec["description"],
                button_style=spec["button_style"],
                icon=spec["icon"],
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
