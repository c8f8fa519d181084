"""The panel across a restart: the process that drew it is gone, but the browser still shows it.

An in-place restart keeps the kernel's connection (same ports, same PID), so the frontend keeps the panel's widget
models and their comm ids. Before the exec, the panel (or, for a restart asked elsewhere, the extension) leaves
every one of those ids in its hand-over (``panel.handover``); the new process reopens comms with the same ids,
without announcing them, and rebuilds the same widgets on them, which makes the old panel live again: its heading
says how the replay went ("Recovered: ..." or what failed, in red), its status line follows the replay, and every
button works as before, the restart buttons included (any number of restarts), since the widgets are this
process's own. A page reload finds them too: the frontend asks the kernel for every widget it has, and gets the
whole panel.

Messages published before a frontend has reconnected are dropped, so nothing is sent until a client has
subscribed to iopub again (ipykernel 7 says so with its welcome message; on ipykernel 6 a TCP connection to the
iopub port is the sign) or a second has passed.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from nb_cudaguard.panel.actions import PanelActions
from nb_cudaguard.panel.controls import COPY_AREA_CLASS, plan_row_layout
from nb_cudaguard.panel.handover import HandoverError, PanelHandover
from nb_cudaguard.panel.render_html import outcome_head
from nb_cudaguard.panel.static import StaticTwin
from nb_cudaguard.relaunch.iopub_clients import clients_are_back
from nb_cudaguard.relaunch.outcome import ReplayOutcome
from nb_cudaguard.relaunch.resume import show_at_next_cell

CLIENT_WAIT = 1.0
POLL = 0.1
_HEAD = re.compile(r"<!--nbcg-head-->.*?<!--/nbcg-head-->", re.S)
_TONE = {"recovered": "ok", "nothing": "error", "failed": "error", "incomplete": "error"}


def reattach_after_restart(shell, guard) -> None:
    """Called when the extension loads: if a panel was live before this restart, make it live again here."""
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
    outcome.in_panel = handover.asked
    panel = ReattachedPanel(handover, guard, outcome, shell.kernel)
    threading.Thread(target=panel.run, name="nb_cudaguard-panel", daemon=True).start()


def _refused(shell, message: str) -> None:
    """In the kernel's log, and at the start of the user's next cell: the old panel itself cannot be reached."""
    log = getattr(getattr(shell, "kernel", None), "log", None)
    if log is not None:
        log.warning(message)
    show_at_next_cell(shell, lambda: message)


def _secondary_comm(comm_id: str, kernel):
    """A kernel-side end for a comm the frontend already has: registered to receive, never announced.

    A comm learns its kernel when it first publishes, and ipywidgets sends nothing through a comm without one, so
    the kernel is set here (an announced comm gets it from its ``comm_open``). Its replies go to the main shell,
    as they did in the process that opened it (ipykernel 7 routes a comm's messages to the subshell it last
    published from, and this one has published from none yet).
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
    channel._reply_subshell_id = None  # type: ignore[attr-defined]  # ipykernel >= 7.4 reads it, older ones never
    comm_package.get_comm_manager().register_comm(channel)
    return channel


class ReattachedPanel(PanelActions):
    """The old panel's widgets, rebuilt on their own comm ids in the new process."""

    def __init__(self, handover: PanelHandover, guard, outcome: ReplayOutcome, kernel) -> None:
        self.handover_in = handover
        self.guard = guard
        self.outcome = outcome
        self.kernel = kernel
        self.markdown = handover.markdown
        # made static when the kernel goes for good; the handover has the report as Markdown only, for both texts
        self.twin = StaticTwin(handover.twin, handover.markdown, handover.markdown) if handover.twin else None
        self.buttons: dict[str, Any] = {}
        self.boxes: list[tuple[Any, int, bool]] = []

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
        self._attach()
        self.guard.live_panel = self
        self.guard.panels.append(self)
        shown = None
        while True:
            done = self.outcome.done
            message, tone = self._progress()
            if message != shown:
                self.say(message, tone)
                shown = message
            if done:
                break
            time.sleep(POLL)
        self._show_outcome()
        self._busy(False, self._progress()[0], self._progress()[1])

    def _attach(self) -> None:
        """The same widget tree, on the same ids; the restart buttons and the plan stay disabled until the replay
        is done (a second restart before the first replay ended would replay from a half-built state)."""
        import ipywidgets as w

        h, kernel = self.handover_in, self.kernel
        self.body = w.HTML(h.html, comm=_secondary_comm(h.body, kernel))
        self.status = w.HTML("", comm=_secondary_comm(h.status, kernel))
        self.output = w.Output(comm=_secondary_comm(h.output, kernel))
        self.copy_area = w.Textarea(
            comm=_secondary_comm(h.copy_area, kernel), layout=w.Layout(display="none", width="100%", height="14em")
        )
        self.copy_area.add_class(COPY_AREA_CLASS)
        handlers = {
            "replay": lambda _: self._restart(False),
            "diagnose": lambda _: self._restart(True),
            "copy": lambda _: self._copy(),
        }
        for key, state in h.buttons.items():
            button = w.Button(
                comm=_secondary_comm(state.model_id, kernel),
                description=state.description,
                button_style=state.button_style,
                icon=state.icon,
                tooltip=state.description,
                disabled=True,
                layout=w.Layout(width="auto"),
            )
            button.add_class(f"nbcg-{key}")
            if key in handlers:
                button.on_click(self._guarded(handlers[key]))
            self.buttons[key] = button
        for row in h.boxes:
            box = w.Checkbox(
                comm=_secondary_comm(row.model_id, kernel),
                value=row.value,
                description=row.description,
                indent=False,
                disabled=True,
                layout=plan_row_layout(w),
            )
            self.boxes.append((box, row.execution_count, row.minimal))
        self.plan = self.plan_head = None
        if h.plan:
            self.plan_head = w.HTML(h.plan_html, comm=_secondary_comm(h.plan_head, kernel))
            children = [self.plan_head, *(box for box, _, _ in self.boxes)]
            self.plan = w.VBox(children, comm=_secondary_comm(h.plan, kernel))
            self.plan.add_class("nbcg-plan")
        self.actions = w.HBox(
            list(self.buttons.values()),
            comm=_secondary_comm(h.actions, kernel),
            layout=w.Layout(flex_flow="row wrap", overflow="visible"),
        )
        rows = [self.body, *([self.plan] if self.plan is not None else []), self.actions]
        self.root = w.VBox(
            [*rows, self.status, self.output, self.copy_area],
            comm=_secondary_comm(h.root, kernel),
            layout=w.Layout(overflow="visible"),
        )
        self.root.add_class("nb-cudaguard-panel")
        for button in self.buttons.values():  # the frontend's copies still hold the old process's callbacks
            button.send_state(["disabled", "_dom_classes"])

    def _show_outcome(self) -> None:
        """The heading says how the replay went, where the user looks first."""
        html = self.handover_in.html
        state = self.outcome.state
        if html and _HEAD.search(html):
            head = outcome_head(self.outcome.headline(), _TONE[state], self.outcome.carry_note or "")
            self.body.value = _HEAD.sub(lambda _: head, html, count=1)

    def _progress(self) -> tuple[str, str]:
        outcome = self.outcome
        steps = outcome.plan.steps
        if outcome.done:
            line = outcome.headline()
            if outcome.diagnosis:
                said = " ".join(outcome.diagnosis.splitlines()[:2])  # what is wrong, and its fix
                line += f" The failing cell under %%cudacheck: {said[:400]}"
            return line, _TONE[outcome.state]
        done = len(outcome.ran)
        if done < len(steps):
            record = steps[done].record
            return f"Restarted. Replaying {done + 1}/{len(steps)}: {record.label} {record.first_line[:60]}…", "busy"
        return f"Restarted. Replayed {done} cell(s); finishing…", "busy"
