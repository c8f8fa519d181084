"""What both processes do to a panel's widgets: say something in its status line, and copy its report.

The process that drew the panel uses them while it lives; after an in-place restart, the new process uses them on
the same widgets, reopened by ``panel.follower``. Kept apart from both so that neither imports the other.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

_TONES = {
    "error": "var(--jp-error-color1,#d32f2f)",
    "ok": "var(--jp-success-color1,#388e3c)",
    "busy": "var(--jp-warn-color1,#ef6c00)",
}


def status_html(message: str, tone: str = "") -> str:
    colour = _TONES.get(tone, "var(--jp-ui-font-color1,inherit)")
    return f'<span class="nbcg-status" style="color:{colour}">{escape(message, quote=False)}</span>'


COPY_AREA_CLASS = "nbcg-copy-area"  # the box with the report's Markdown, shown only when the copy failed


def clipboard_script(markdown: str) -> str:
    """Browser-side copy. ``element`` is the output node in JupyterLab, Notebook 7 and classic Notebook; the
    clipboard needs a focused page in a secure context, so a refusal is said where the user looks, and only then
    the panel's box with the Markdown appears, to copy by hand."""
    return (
        "(async (text, node) => {\n"
        "  if (node && node.jquery) { node = node[0]; }\n"
        "  const say = (t) => { if (node) { node.textContent = t; } };\n"
        "  try { await navigator.clipboard.writeText(text); say('Copied the report (Markdown) to the clipboard.'); }\n"
        "  catch (e) { say('The browser did not allow clipboard access (' + (e && e.name) + '): '\n"
        "              + 'select the text in the box below and copy it.');\n"
        f"    const box = node && node.closest('.nb-cudaguard-panel') && node.closest('.nb-cudaguard-panel')"
        f".querySelector('.{COPY_AREA_CLASS}');\n"
        "    if (box) { box.style.display = ''; } }\n"
        f"}})({json.dumps(markdown)}, typeof element === 'undefined' ? null : element);"
    )


def copy_report(markdown: str, area: Any, output: Any) -> None:
    """Try the clipboard; the box holds the Markdown, hidden unless the browser refused the copy."""
    from IPython.display import Javascript, clear_output, display

    area.value = markdown
    with output:
        clear_output()
        display(Javascript(clipboard_script(markdown)))


def make_button(w: Any, key: str, description: str, style: str, icon: str, on_click: Any) -> Any:
    """A panel button as every panel draws it: its key as a CSS class (``nbcg-<key>``), its label as the tooltip."""
    button = w.Button(
        description=description, button_style=style, icon=icon, layout=w.Layout(width="auto"), tooltip=description
    )
    button.add_class(f"nbcg-{key}")
    button.on_click(on_click)
    return button


def plan_row_layout(w: Any) -> Any:
    """A replay plan's row spans the panel's width and no more: ipywidgets' own 2 px side margins on a 100 % wide
    checkbox made every row, and so the plan, scroll sideways at every width."""
    return w.Layout(width="100%", margin="1px 0")
