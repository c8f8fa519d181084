"""What a panel's buttons do, for the panel the failing cell drew and for the same panel reopened by the process
after an in-place restart (``panel.follower``): restart and replay the ticked cells, copy the report, say how it
went in the status line. Both hold the same widgets under the same names; only how they got them differs.

Widget callbacks run only while the kernel is idle (comm messages share the shell queue), so a click is handled
after the failing cell has returned. Their output goes into the panel's own Output widget: JupyterLab shows
callback output nowhere else.
"""

from __future__ import annotations

from typing import Any, Protocol

from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.panel.controls import copy_report, status_html
from nb_cudaguard.panel.handover import BoxState, ButtonState, PanelHandover, withdraw
from nb_cudaguard.panel.static import StaticTwin
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay.plan import ReplayPlan


class PanelSession(CudaGuardState, Protocol):
    """What the panel reads from the extension's session (``CudaGuard``), which passes itself in: what a restart
    needs, the incidents whose locals "Release memory" drops, and the live panel a restart hands over."""

    incidents: list[Incident]
    live_panel: Any  # the last panel drawn (or reopened after a restart)
    panels: list[Any]  # every panel this process drew or reopened, made static when the kernel goes for good


def request_restart(
    guard: CudaGuardState, replay: str = "minimal", diagnose: bool = False, cells: list[int] | None = None
) -> ReplayPlan:
    """The one place the panel asks for a restart, so that it follows ``relaunch.restart.restart``'s signature."""
    from nb_cudaguard.relaunch.restart import restart

    return restart(guard, replay=replay, diagnose=diagnose, cells=cells)


class PanelActions:
    """The widgets every panel has, and what its buttons do. ``boxes``: (checkbox, execution count, ticked by
    the minimal plan) for each row of the replay plan."""

    guard: PanelSession
    root: Any
    body: Any
    actions: Any
    plan: Any  # None without a plan
    plan_head: Any
    status: Any
    output: Any
    copy_area: Any
    buttons: dict[str, Any]
    boxes: list[tuple[Any, int, bool]]
    markdown: str
    twin: StaticTwin | None  # the report's static copy, in the output before the widget's (None: not known)

    def _guarded(self, handler):
        """Callback errors would otherwise vanish (JupyterLab shows them nowhere): say them in the status line."""

        def run(button) -> None:
            try:
                handler(button)
            except Exception as exc:
                self._busy(False, f"nb_cudaguard: that did not work ({type(exc).__name__}: {exc})", tone="error")

        return run

    def _busy(self, busy: bool, message: str, tone: str = "") -> None:
        for button in self.buttons.values():
            button.disabled = busy
        for box, _, _ in self.boxes:
            box.disabled = busy
        self.say(message, tone)

    def say(self, message: str, tone: str = "") -> None:
        self.status.value = status_html(message, tone) if message else ""

    def chosen_cells(self) -> list[int] | None:
        """None while the plan is the minimal one, so that the restart computes it afresh; else the ticked cells."""
        if all(box.value == minimal for box, _, minimal in self.boxes):
            return None
        return [count for box, count, _ in self.boxes if box.value]

    def _restart(self, diagnose: bool) -> None:
        from IPython.utils.capture import capture_output

        cells = self.chosen_cells()
        self._busy(True, "Restarting the kernel…", "busy")
        self.handover(asked=True).to_env()
        try:
            with capture_output():  # its own announcement: the status line says the same, and follows the replay
                plan = request_restart(self.guard, diagnose=diagnose, cells=cells)
        except Exception:
            withdraw()
            raise
        what = f"then replaying {len(plan.steps)} cell(s)" if plan.steps else "with nothing to replay"
        then = ", then running the failing cell under %%cudacheck" if diagnose else ""
        self.say(f"Restarting the kernel, {what}{then}…", "busy")

    def _copy(self) -> None:
        """One message, where the user looks: the clipboard's answer in the output line; the box below holds the
        Markdown either way."""
        self.say("")
        copy_report(self.markdown, self.copy_area, self.output)

    def handover(self, asked: bool = False) -> PanelHandover:
        """What the new process needs to find this panel again after the restart (``panel.follower``)."""
        buttons = {
            key: ButtonState(b.model_id, b.description, b.button_style, b.icon) for key, b in self.buttons.items()
        }
        boxes = tuple(BoxState(b.model_id, b.description, b.value, m, c) for b, c, m in self.boxes)
        plan = self.plan.model_id if self.plan is not None else ""
        head = self.plan_head.model_id if self.plan_head is not None else ""
        return PanelHandover(
            root=self.root.model_id,
            body=self.body.model_id,
            actions=self.actions.model_id,
            plan=plan,
            plan_head=head,
            status=self.status.model_id,
            output=self.output.model_id,
            copy_area=self.copy_area.model_id,
            buttons=buttons,
            boxes=boxes,
            html=self.body.value,
            plan_html=self.plan_head.value if self.plan_head is not None else "",
            markdown=self.markdown,
            asked=asked,
            twin=self.twin.token if self.twin is not None else "",
        )
