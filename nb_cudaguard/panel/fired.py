"""The two buttons under a fired fast check's error: "Re-run under exact checks" and "Re-run the cells that build
<names>" (``panel.rerun`` does the work). Shown by the extension after the failing cell, where widgets render; the
error's own text names the same choices as ``%cudaguard rerun --exact|--rebuild`` for everywhere else.

As with the panel, a click is handled once the kernel is idle (comm messages share the shell queue), its output
goes into the widget's own Output (JupyterLab shows callback output nowhere else), and an error in a handler is said
in the status line rather than lost.
"""

from __future__ import annotations

from html import escape
from typing import Any

from nb_cudaguard.panel.controls import make_button, status_html
from nb_cudaguard.panel.rerun import FiredCell, RerunSession, rebuild, rerun_exact
from nb_cudaguard.panel.static import WIDGET_VIEW, StaticTwin, new_token
from nb_cudaguard.panel.widget import widgets_can_render

EXACT = "Re-run under exact checks"
_LIVE_CLASS = "nb-cudaguard-fired"
_COMMANDS = "%cudaguard rerun --exact, or fix the input and %cudaguard rerun --rebuild (no restart)"
_NOTE = (
    '<div class="nbcg nbcg-dim" style="margin-top:4px"><i>What its buttons did: <code>%cudaguard rerun --exact</code>, '
    "or fix the input and <code>%cudaguard rerun --rebuild</code> (no restart).</i></div>"
)


def show_choices(guard: RerunSession, fired: FiredCell) -> FiredChoices | None:
    """Display the buttons under the failing cell's error; None (nothing shown) where widgets cannot render."""
    if not widgets_can_render(guard.shell):
        return None
    choices = FiredChoices(guard, fired)
    choices.twin.show(choices.bundle(), choices.body.value)
    guard.panels.append(choices)
    return choices


def rebuild_label(names: list[str]) -> str:
    shown = ", ".join(names[:4]) + (" …" if len(names) > 4 else "")
    return f"Re-run the cells that build {shown}" if names else "Re-run the cells that build its names"


class FiredChoices:
    """The widget: a line saying why, the two buttons, a status line and an Output for what the re-runs show."""

    def __init__(self, guard: RerunSession, fired: FiredCell) -> None:
        import ipywidgets as w

        self.guard = guard
        self.fired = fired
        label = fired.record.label
        why = (
            f"the fast check ran its op on clamped values, so {label}'s results are wrong from that op on. The CUDA "
            "context is healthy: no restart is needed."
        )
        # the static twin (panel.static) shows wherever the widget's model is gone, as the report's twin does
        self.twin = StaticTwin(
            new_token(), f"nb_cudaguard: {why}\n{_COMMANDS}", f"**nb_cudaguard**: {why}", _NOTE, _LIVE_CLASS
        )
        self.head = w.HTML(f"{self.twin.live_style()}<b>nb_cudaguard</b>: {escape(why)}")
        self.body = self.head  # what the twin shows (panel.static.go_static reads a panel's body)
        self.status = w.HTML("")
        self.output = w.Output()
        self.buttons: dict[str, Any] = {}
        self._button(w, "exact", EXACT, "warning", "search", self._exact)
        self._button(w, "rebuild", rebuild_label(list(fired.error.changed_names)), "info", "refresh", self._rebuild)
        row = w.HBox(list(self.buttons.values()), layout=w.Layout(flex_flow="row wrap", overflow="visible"))
        self.widget = w.VBox([self.head, row, self.status, self.output], layout=w.Layout(overflow="visible"))
        self.widget.add_class(_LIVE_CLASS)

    def _button(self, w, key: str, description: str, style: str, icon: str, handler) -> None:
        self.buttons[key] = make_button(w, key, description, style, icon, self._guarded(handler))

    def bundle(self) -> dict:
        """The widget's output: its view, and empty text where it cannot be drawn (the twin has the choices)."""
        view = {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        return {WIDGET_VIEW: view, "text/plain": ""}

    def _guarded(self, handler):
        def run(_button) -> None:
            self._busy(True)
            try:
                handler()
            except Exception as exc:
                self.say(f"nb_cudaguard: that did not work ({type(exc).__name__}: {exc})", "error")
            finally:
                self._busy(False)

        return run

    def _busy(self, busy: bool) -> None:
        for button in self.buttons.values():
            button.disabled = busy

    def say(self, message: str, tone: str = "") -> None:
        self.status.value = status_html(message, tone)

    def _exact(self) -> None:
        from IPython.display import clear_output

        label = self.fired.record.label
        self.say(f"Running {label} again under the exact checks…", "busy")
        with self.output:
            clear_output()
            error = rerun_exact(self.guard, self.fired)  # its error is shown here, by the shell
        if error is None:
            self.say(f"{label} ran without a failure under the exact checks (its input changed since).", "ok")
            return
        first = (str(error).splitlines() or [""])[0]
        self.say(f"The exact checks stopped {label}: {type(error).__name__}: {first}", "error")

    def _rebuild(self) -> None:
        from IPython.display import clear_output

        self.say("Re-running the cells that build what the failing cell changed…", "busy")
        outcome = rebuild(self.guard, self.fired)
        with self.output:
            clear_output()
            print(outcome.to_text())
        self.say(outcome.summary(), "error" if outcome.failed is not None else "ok")
