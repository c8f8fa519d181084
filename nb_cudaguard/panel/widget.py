"""The panel shown after a failing CUDA cell: the explanation, the replay plan, and the actions.

Stock ipywidgets only, so no frontend build is needed. The panel is displayed as two outputs: its static twin, the
same report as text, Markdown and HTML (``panel.static``), which shows wherever the widget cannot be drawn (its model
gone after a reload, nbconvert, GitHub, nbviewer) and is hidden while it is, then the widget's. Terminal IPython
gets the report alone.

Widget callbacks run only while the kernel is idle, because comm messages share the shell queue with cells
(ipykernel), so a click is handled after the failing cell has returned. Their output goes into the panel's own
Output widget: JupyterLab shows callback output nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.panel.actions import PanelActions, PanelSession
from nb_cudaguard.panel.content import ReportContent, verdict_of
from nb_cudaguard.panel.controls import COPY_AREA_CLASS, make_button, plan_row_layout
from nb_cudaguard.panel.memory import MemoryFacts, memory_facts, release
from nb_cudaguard.panel.report import Report, text_bundle
from nb_cudaguard.panel.static import WIDGET_VIEW, StaticTwin, new_token


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
        return self.report.content(self.tensors, self.memory)


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
    panel.twin.show(panel.bundle(), panel.body.value)
    guard.live_panel = panel
    guard.panels.append(panel)
    return panel


class Panel(PanelActions):
    """The widgets of one failure's panel, built from the report."""

    def __init__(self, facts: PanelFacts, guard: PanelSession) -> None:
        import ipywidgets as w

        self.facts = facts
        self.guard = guard
        self.texts = text_bundle(facts.content())  # rendered once: the widget's body and its static twin share it
        self.markdown = self.texts["text/markdown"]
        self.twin: StaticTwin = StaticTwin(new_token(), self.texts["text/plain"], self.markdown)
        self.body = w.HTML(self.twin.live_style() + self.texts["text/html"], layout=w.Layout(overflow="visible"))
        self.status = w.HTML("")
        self.output = w.Output()
        self.copy_area = w.Textarea(layout=w.Layout(display="none", width="100%", height="14em"))
        self.copy_area.add_class(COPY_AREA_CLASS)
        self.buttons: dict[str, Any] = {}  # ipywidgets.Button by key
        self.boxes: list[tuple[Any, int, bool]] = []
        self.plan = self.plan_head = None
        rows = [self.body]
        if facts.kind == "poisoned":
            self.plan = self._plan_section(w)
            rows.append(self.plan)
            self._button(w, "replay", "Restart & replay", "danger", "refresh", lambda _: self._restart(False))
            self._button(
                w, "diagnose", "Restart, replay & diagnose", "warning", "stethoscope", lambda _: self._restart(True)
            )
        if facts.kind == "out_of_memory":
            self._button(w, "release", "Release memory", "info", "recycle", lambda _: self._release())
        self._button(w, "copy", "Copy report", "", "clipboard", lambda _: self._copy())
        self.actions = w.HBox(list(self.buttons.values()), layout=w.Layout(flex_flow="row wrap", overflow="visible"))
        rows += [self.actions, self.status, self.output, self.copy_area]
        self.root = self.widget = w.VBox(rows, layout=w.Layout(overflow="visible"))
        self.widget.add_class("nb-cudaguard-panel")

    # --- building
    def _button(self, w, key: str, description: str, style: str, icon: str, handler) -> None:
        self.buttons[key] = make_button(w, key, description, style, icon, self._guarded(handler))

    def _plan_section(self, w):
        from html import escape

        from nb_cudaguard.replay.plan import build_plan
        from nb_cudaguard.snapshot.plan import snapshot_rows

        journal = self.guard.journal
        minimal = build_plan(journal, "minimal")
        everything = build_plan(journal, "all")
        chosen = {step.record.seq for step in minimal.steps}
        carry = self._carry_preview(minimal)
        fates = {step.record.seq: carry.step_text(step) for step in carry.steps} if carry is not None else {}
        if self.guard.snapshot:  # training cells the GPU state's snapshot replaces (snapshot.plan)
            fates |= snapshot_rows(minimal, journal, self.guard.snapshots)
        for step in everything.steps:
            record = step.record
            if record.execution_count is None:
                continue
            fate = f"  · {fates[record.seq]}" if record.seq in fates else ""
            box = w.Checkbox(
                value=record.seq in chosen,
                description=f"{record.label}  {record.duration:.2f} s  {_shorten(record.first_line)}{fate}",
                indent=False,
                layout=plan_row_layout(w),
            )
            self.boxes.append((box, record.execution_count, record.seq in chosen))
        target = f" for {minimal.target.label}" if minimal.target is not None else ""
        seconds = carry.expected_seconds if carry is not None else minimal.recorded_seconds
        carried = f", {len(carry.carried)} value(s) carried instead of replayed" if carry and carry.carried else ""
        self.plan_head = w.HTML(
            f"<b>Replay plan</b>{escape(target)}: the {len(minimal.steps)} ticked of {len(everything.steps)} recorded "
            f"cells rebuild what it reads (about {seconds:.1f} s{escape(carried)})."
        )
        plan = w.VBox([self.plan_head, *(box for box, _, _ in self.boxes)])
        plan.add_class("nbcg-plan")
        return plan

    def _carry_preview(self, minimal):
        """The carry plan the restart would make for the ticked cells, measured without writing anything (the
        values are pickled to nowhere), when ``CudaGuard.carry`` is on; else None."""
        if not (self.guard.carry and minimal.steps and minimal.target is not None):
            return None
        from nb_cudaguard.carry.files import plan_for

        return plan_for(self.guard.shell, self.guard, minimal)

    def bundle(self) -> dict:
        """The widget's output: its view, and empty text where it cannot be drawn (the twin has the report)."""
        view = {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        return {WIDGET_VIEW: view, "text/plain": ""}

    def _release(self) -> None:
        self._busy(True, "Releasing memory…")
        allocated = release(self.guard.shell, self.guard.incidents)
        self.facts.memory = memory_facts(self.facts.report.incident)
        self.texts = text_bundle(self.facts.content())
        self.markdown = self.texts["text/markdown"]
        self.twin = StaticTwin(self.twin.token, self.texts["text/plain"], self.markdown)
        self.body.value = self.twin.live_style() + self.texts["text/html"]
        still = f" PyTorch now holds {allocated:,} bytes." if allocated is not None else ""
        self._busy(False, f"Dropped the failed cell's traceback and collected garbage.{still}", "ok")


def _shorten(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
