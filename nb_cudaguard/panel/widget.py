"""The panel shown after a failing CUDA cell: the explanation, the replay plan, and the actions.

Stock ipywidgets only, so no frontend build is needed. The panel is displayed as one bundle that carries the
widget view *and* the same report as text, Markdown and HTML: JupyterLab, Notebook 7 and VS Code show the widget;
terminal IPython, nbconvert and static viewers (GitHub, nbviewer) pick the richest format they can.

Widget callbacks run only while the kernel is idle, because comm messages share the shell queue with cells
(ipykernel), so a click is handled after the failing cell has returned. Their output goes into the panel's own
Output widget: JupyterLab shows callback output nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.panel.content import ReportContent, build, verdict_of
from nb_cudaguard.panel.controls import copy_report, status_html
from nb_cudaguard.panel.handover import ButtonState, PanelHandover, withdraw
from nb_cudaguard.panel.memory import MemoryFacts, memory_facts, release
from nb_cudaguard.panel.report import Report, text_bundle
from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.relaunch.session_state import CudaGuardState
from nb_cudaguard.replay.plan import ReplayPlan

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class PanelSession(CudaGuardState, Protocol):
    """What the panel reads from the extension's session (``CudaGuard``), which passes itself in: what a restart
    needs, and the incidents whose locals "Release memory" drops."""

    incidents: list[Incident]


@dataclass
class PanelFacts:
    """What the panel shows beyond the Report: gathered once, rendered in every format."""

    report: Report
    tensors: list[tuple[str, str]] = field(default_factory=list)
    memory: MemoryFacts | None = None

    @property
    def kind(self) -> str:
        return verdict_of(self.report.incident).kind

    def content(self) -> ReportContent:
        return build(self.report.incident, self.report.diagnosis, self.tensors, self.memory)


def gather(report: Report) -> PanelFacts:
    """Everything the panel shows, read once, right after the failure."""
    from nb_cudaguard.panel.involved import involved_tensors

    incident = report.incident
    memory = memory_facts(incident) if verdict_of(incident).kind == "out_of_memory" else None
    return PanelFacts(report, involved_tensors(report), memory)


def widgets_can_render(shell) -> bool:
    """A kernel (some frontend may hold a widget manager) with ipywidgets installed. Terminal IPython cannot."""
    if getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def show_panel(report: Report, guard: PanelSession) -> Panel | None:
    """Display the panel (or, without widgets, the same report as text, Markdown and HTML)."""
    from IPython.display import display

    facts = gather(report)
    if not widgets_can_render(guard.shell):
        display(text_bundle(facts.content()), raw=True)
        return None
    panel = Panel(facts, guard)
    display(panel.bundle(), raw=True)
    return panel


def request_restart(
    guard: CudaGuardState, replay: str = "minimal", diagnose: bool = False, cells: list[int] | None = None
) -> ReplayPlan:
    """The one place the panel asks for a restart, so that it follows ``relaunch.restart.restart``'s signature."""
    from nb_cudaguard.relaunch.restart import restart

    return restart(guard, replay=replay, diagnose=diagnose, cells=cells)


class Panel:
    """The widgets of one failure's panel, and what its buttons do."""

    def __init__(self, facts: PanelFacts, guard: PanelSession) -> None:
        import ipywidgets as w

        self.facts = facts
        self.guard = guard
        self.texts = text_bundle(facts.content())  # rendered once: the widget's body and the fallback bundle share it
        self.markdown = self.texts["text/markdown"]
        self.body = w.HTML(self.texts["text/html"])
        self.status = w.HTML("")
        self.output = w.Output()
        self.copy_area = w.Textarea(layout=w.Layout(display="none", width="100%", height="14em"))
        self.buttons: dict[str, Any] = {}  # ipywidgets.Button by key
        self.plan_boxes: list[tuple[Any, CellRecord]] = []  # (ipywidgets.Checkbox, its cell)
        self.minimal: set[int] = set()
        rows = [self.body]
        if facts.kind == "poisoned":
            rows.append(self._plan_section(w))
            self._button(w, "replay", "Restart & replay", "danger", "refresh", lambda _: self._restart(False))
            self._button(
                w, "diagnose", "Restart, replay & diagnose", "warning", "stethoscope", lambda _: self._restart(True)
            )
        if facts.kind == "out_of_memory":
            self._button(w, "release", "Release memory", "info", "recycle", lambda _: self._release())
        self._button(w, "copy", "Copy report", "", "clipboard", lambda _: self._copy())
        actions = w.HBox(list(self.buttons.values()), layout=w.Layout(flex_flow="row wrap"))
        rows += [actions, self.status, self.output, self.copy_area]
        self.widget = w.VBox(rows)
        self.widget.add_class("nb-cudaguard-panel")

    # --- building
    def _button(self, w, key: str, description: str, style: str, icon: str, handler) -> None:
        button = w.Button(
            description=description, button_style=style, icon=icon, layout=w.Layout(width="auto"), tooltip=description
        )
        button.add_class(f"nbcg-{key}")
        button.on_click(self._guarded(handler))
        self.buttons[key] = button

    def _plan_section(self, w):
        from html import escape

        from nb_cudaguard.carry.plan import size_text
        from nb_cudaguard.replay.plan import build_plan

        journal = self.guard.journal
        minimal = build_plan(journal, "minimal")
        everything = build_plan(journal, "all")
        self.minimal = {step.record.seq for step in minimal.steps}
        carry = self._carry_preview(minimal)
        fates = {step.record.seq: carry.step_text(step) for step in carry.steps} if carry is not None else {}
        for step in everything.steps:
            record = step.record
            if record.execution_count is None:
                continue
            fate = f"  · {fates[record.seq]}" if record.seq in fates else ""
            box = w.Checkbox(
                value=record.seq in self.minimal,
                description=f"{record.label}  {record.duration:.2f} s  {_shorten(record.first_line)}{fate}",
                indent=False,
                layout=w.Layout(width="100%"),
            )
            self.plan_boxes.append((box, record))
        target = f" for {minimal.target.label}" if minimal.target is not None else ""
        carrying = ""
        if carry is not None:
            carrying = (
                f" With {len(carry.carried)} value(s) carried across the restart ({size_text(carry.carried_bytes)}),"
                f" the ticked plan is ready in about {carry.expected_seconds:.2f} s: each of its rows says whether"
                " the cell is replayed or skipped because its values are carried."
            )
        head = w.HTML(
            f"<b>Replay plan</b>{target}: {len(minimal.steps)} of {len(everything.steps)} recorded cells rebuild what "
            f"the failing cell reads ({minimal.recorded_seconds:.2f} s as recorded).{escape(carrying)} Untick a slow "
            "cell to leave it out; tick one to add it."
        )
        return w.VBox([head, *(box for box, _ in self.plan_boxes)])

    def _carry_preview(self, minimal):
        """The carry plan the restart would make for the ticked cells, measured without writing anything (the
        values are pickled to nowhere), when ``CudaGuard.carry`` is on; else None."""
        if not (self.guard.carry and minimal.steps and minimal.target is not None):
            return None
        from nb_cudaguard.carry.files import plan_for

        return plan_for(self.guard.shell, self.guard, minimal)

    def bundle(self) -> dict:
        view = {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        return {WIDGET_VIEW: view, **self.texts}

    # --- actions
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
        for box, _ in self.plan_boxes:
            box.disabled = busy
        self.say(message, tone)

    def say(self, message: str, tone: str = "") -> None:
        self.status.value = status_html(message, tone)

    def chosen_cells(self) -> list[int] | None:
        """None while the plan is the minimal one, so that the restart computes it afresh; else the ticked cells."""
        ticked = {record.seq for box, record in self.plan_boxes if box.value}
        if ticked == self.minimal:
            return None
        return [r.execution_count for box, r in self.plan_boxes if box.value and r.execution_count is not None]

    def _restart(self, diagnose: bool) -> None:
        from IPython.utils.capture import capture_output

        cells = self.chosen_cells()
        self._busy(True, "Restarting the kernel in place…")
        self.handover().to_env()
        try:
            with capture_output():  # its own announcement: the status line says the same, and follows the replay
                plan = request_restart(self.guard, diagnose=diagnose, cells=cells)
        except Exception:
            withdraw()
            raise
        what = f"replaying {len(plan.steps)} cell(s)" if plan.steps else "with nothing to replay"
        then = ", then running the failing cell under %%cudacheck" if diagnose else ""
        self.say(f"Restarting the kernel in place (PID {os.getpid()}), {what}{then}…", "busy")

    def handover(self) -> PanelHandover:
        """What the new process needs to find this panel again after the restart (``panel.follower``)."""
        buttons = {
            key: ButtonState(b.model_id, b.description, b.button_style, b.icon) for key, b in self.buttons.items()
        }
        return PanelHandover(
            self.status.model_id, self.output.model_id, self.copy_area.model_id, buttons, self.markdown
        )

    def _release(self) -> None:
        self._busy(True, "Releasing memory…")
        allocated = release(self.guard.shell, self.guard.incidents)
        self.facts.memory = memory_facts(self.facts.report.incident)
        self.texts = text_bundle(self.facts.content())
        self.markdown = self.texts["text/markdown"]
        self.body.value = self.texts["text/html"]
        still = f" PyTorch now holds {allocated:,} bytes." if allocated is not None else ""
        self._busy(False, f"Dropped the failed cell's traceback and collected garbage.{still}", "ok")

    def _copy(self) -> None:
        copy_report(self.markdown, self.copy_area, self.output)
        self.say("The report (Markdown) is in the box below; the browser's clipboard has it too if it allowed it.")


def _shorten(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
