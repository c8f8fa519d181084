"""The panel's static twin: the same report as plain HTML, in an output of its own right before the widget's, shown
wherever the widget cannot be drawn and hidden while it is.

Why a second output: a widget view whose model is gone (the page reloaded after the kernel was restarted or shut
down from the frontend, the notebook reopened with a new kernel) renders ipywidgets' "Error displaying widget: model
not found" and never falls back to another format of its bundle (jupyterlab-manager's ``WidgetRenderer``); and
JupyterLab and Notebook 7 drop every display update the old process sends while a restart they asked for is under
way (``KernelConnection.restart`` disposes the futures that route ``update_display_data`` before it asks the server
to restart), so no message from the kernel can fix the saved output then. CSS decides which of the two shows:

- the live panel's HTML carries a rule that hides its twin, by the twin's element id: while the widget is drawn the
  twin is hidden, in every frontend that puts both outputs in one document;
- the twin carries rules for JupyterLab and Notebook 7 (``_twin_style``): the widget's output is hidden unless it
  holds a live panel, and the twin while that output is loading or drawn, so "Loading widget..." and "model not
  found" are never seen and the report is. nbconvert, nbviewer and GitHub show the twin's HTML (the widget's output
  is empty there).

When the kernel goes for good (a ``shutdown_request``: the frontend's Restart or Shut down, a manager's shutdown)
or the extension unloads, every panel still shown is made static where the frontend still routes the update
(JupyterLab's Shut down, ``%unload_ext``, clients that keep display ids across a restart): the widget's output is
emptied and the twin gets the panel's latest HTML, its heading after a replay included. An in-place restart is not
that: the same panel lives on in the new process (``panel.follower``). The twin is not updated while the panel
lives (Notebook 7 would fold the cell), so where the update is dropped it shows the report as the failure drew it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

# what is true wherever the copy shows: the verdict was the drawing kernel's, about that kernel's CUDA context; the
# report lives on in that kernel and across its in-place restarts (SessionState.report), not in a kernel the frontend
# restarted or a new one. So the copy is greyed under a head that says whose it is, and ends with what works now.
STATIC_HEAD = (
    '<div class="nbcg nbcg-static-head" style="margin:2px 0 6px;font-weight:600">From the kernel before the restart'
    '<span style="font-weight:400;opacity:.8"> · a copy of the panel the kernel that ran this cell drew; what it '
    "says about the CUDA context was about that kernel, not this one.</span></div>"
)
STATIC_NOTE = (
    '<div class="nbcg nbcg-static-now" style="margin-top:6px"><b>What works now:</b> apply the fix above to your '
    "code, then run the notebook from the top (Run All). If the cell fails again, nb_cudaguard draws a new panel "
    "there, with working buttons.</div>"
)
GREYED = "filter:grayscale(1);opacity:.7"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EMPTIED: dict[str, str] = {"text/plain": ""}  # the widget's output once the panel is static for good


def new_token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class StaticTwin:
    """One panel's pair of outputs, by ``token``: the widget's (display id ``nbcg-panel-<token>``) and its twin's
    (display id and element id ``nbcg-static-<token>``). ``plain`` and ``markdown`` are the twin's other formats;
    ``note`` ends its greyed HTML (what works now), ``head`` starts it (whose it is); ``live_class`` marks the
    widget when it is drawn."""

    token: str
    plain: str
    markdown: str
    note: str = STATIC_NOTE
    live_class: str = "nb-cudaguard-panel"
    head: str = STATIC_HEAD

    @property
    def widget_id(self) -> str:
        return f"nbcg-panel-{self.token}"

    @property
    def static_id(self) -> str:
        return f"nbcg-static-{self.token}"

    def live_style(self) -> str:
        """Put first in the live panel's HTML: the twin is hidden while the widget is drawn, and the panel fits the
        output's width."""
        sid = self.static_id
        hidden = "{display:none!important}"
        return (
            f"<style>#{sid}{hidden}.jp-OutputArea-child:has(#{sid}){hidden}{fit_style('.' + self.live_class)}</style>"
        )

    def bundle(self, html: str) -> dict[str, str]:
        """The twin's formats, its HTML from the panel's (``html``, with or without the live panel's rule)."""
        sid = self.static_id
        report = html.replace(self.live_style(), "", 1)
        return {
            "text/plain": self.plain,
            "text/markdown": self.markdown,
            "text/html": f'{_twin_style(sid, self.live_class)}<div id="{sid}" class="nbcg-static">{self.head}'
            f'<div class="nbcg-static-copy" style="{GREYED}">{report}</div>{self.note}</div>',
        }

    def show(self, widget_bundle: dict[str, Any], html: str) -> None:
        """The twin's output, then the widget's, next to each other. The twin comes first so that nothing is added
        to the cell once the widget is drawn: Notebook 7 decides whether to fold a cell's outputs into a scrolled
        box whenever they change, and a failing cell's traceback and panel are taller than its threshold."""
        from IPython.display import display

        display(self.bundle(html), raw=True, display_id=self.static_id)
        display(widget_bundle, raw=True, display_id=self.widget_id)

    def go_static(self, html: str) -> None:
        """For good: the widget's output emptied, the twin with the panel's latest HTML (its heading after a replay).
        Only then, since the update makes Notebook 7 measure the cell again."""
        from IPython.display import update_display

        update_display(EMPTIED, raw=True, display_id=self.widget_id)
        if html:  # a panel reopened without its HTML (too long to hand over) leaves its twin as it was
            update_display(self.bundle(html), raw=True, display_id=self.static_id)


def fit_style(scope: str) -> str:
    """CSS rules that keep a panel (``scope``: its live class, or the twin) within the output's width: a widget's
    flex items are as wide as their widest unbreakable content by default, so a table of long names made the
    panel overflow sideways at 800 px, or beside JupyterLab's file browser; long names break instead."""
    return (
        f"{scope} .widget-html-content,{scope} .widget-html,{scope} .widget-box,{scope}{{min-width:0}}"
        f"{scope} code,{scope} pre{{overflow-wrap:anywhere}}{scope} td,{scope} th{{overflow-wrap:break-word}}"
    )


def _twin_style(sid: str, live_class: str) -> str:
    """In JupyterLab and Notebook 7: the twin is hidden while the output after it is a widget view being loaded or
    drawn, and while there is none yet (only in the live app, whose outputs are Lumino widgets: an export always
    has it); the widget's output is hidden unless it holds a live panel. So until the widget is drawn neither shows,
    then the panel does, and "model not found" gives way to the twin.

    jupyterlab-manager's renderer is a Lumino ``Panel`` (``lm-Panel``) with no ``data-mime-type`` (today; either
    mark is taken) that says "Loading widget..." until the view is drawn in it, and that gets the class
    ``jupyter-widgets`` when it cannot draw one ("Error displaying widget: model not found").
    """
    child, twin = ".jp-OutputArea-child", f".jp-OutputArea-child:has(#{sid})"
    widget_output = f'.jp-OutputArea-output:is(.lm-Panel,[data-mime-type="{WIDGET_VIEW}"])'
    return (
        f"<style>{twin}:has(+ {child} > {widget_output}:not(.jupyter-widgets)),.lm-Widget{twin}:last-child"
        f"{{display:none}}{twin} + {child}:not(:has(.{live_class})){{display:none}}{fit_style('#' + sid)}</style>"
    )


def go_static(guard) -> None:
    """Every panel this process drew or reopened, and every set of fast-check buttons it showed, becomes its static
    twin for good (``guard.panels``, then empty)."""
    panels, guard.panels = list(guard.panels), []
    for panel in panels:
        if panel.twin is not None:
            panel.twin.go_static(panel.body.value)


def follow_kernel_exit(guard):
    """When a client asks the kernel to shut down or restart, the panels go static before ipykernel replies;
    returns the undo (None without a kernel)."""
    kernel = getattr(guard.shell, "kernel", None)
    if kernel is None:
        return None
    from nb_cudaguard.relaunch.kernel_internals import on_shutdown_request

    return on_shutdown_request(kernel, lambda restart: go_static(guard))
