"""The panel's hand-over across an in-place restart: every widget of the panel, by model id, with what the new
process needs to make them live again (the report, the plan's rows, the buttons' look).

It travels in an environment variable (an exec keeps the environment), written in one place (``to_env``, by the
process that drew the panel) and read in one place (``from_env``, once, by the new process). ``version`` changes
whenever a field changes meaning; a hand-over of another version, or one that cannot be parsed, is refused whole
(an upgrade installed between the two processes can do that) rather than half understood.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from nb_cudaguard.errors import NbCudaguardError

ENV = "NB_CUDAGUARD_PANEL"
VERSION = 2
# One environment string may hold 128 KiB on Linux; the report's HTML and Markdown share what is left.
TEXT_LIMIT = 48 * 1024


class HandoverError(ValueError, NbCudaguardError):
    """A panel hand-over this nb_cudaguard cannot read: the old panel is left as it is."""


@dataclass(frozen=True)
class ButtonState:
    """A button as the frontend shows it: the new process reopens it with the same look."""

    model_id: str
    description: str
    button_style: str
    icon: str


@dataclass(frozen=True)
class BoxState:
    """One row of the replay plan: a checkbox for one recorded cell, by the execution count the user sees."""

    model_id: str
    description: str
    value: bool
    minimal: bool  # ticked by the minimal plan
    execution_count: int


@dataclass(frozen=True)
class PanelHandover:
    root: str  # model ids: the panel, its body (the report), the row of buttons, the plan and its heading
    body: str
    actions: str
    plan: str  # "" when the panel has no plan (no restart to offer)
    plan_head: str
    status: str
    output: str
    copy_area: str
    buttons: dict[str, ButtonState]  # by the panel's key for each ("replay", "copy", ...)
    boxes: tuple[BoxState, ...]
    html: str  # the body's HTML, whose heading the new process rewrites with the replay's outcome
    plan_html: str
    markdown: str  # the report, for "Copy report"
    asked: bool  # this panel asked for the restart: it, not the next cell, tells the outcome
    twin: str = ""  # the token of the panel's static twin (panel.static): made static when the kernel goes
    version: int = field(default=VERSION)

    def to_env(self) -> None:
        data = asdict(self)
        # HTML is not cut (half a tag breaks the page): one too long is left out, and the heading stays as it was
        data["html"] = self.html if len(self.html) <= TEXT_LIMIT else ""
        data["markdown"] = self.markdown[:TEXT_LIMIT]
        os.environ[ENV] = json.dumps(data)

    @classmethod
    def from_env(cls) -> PanelHandover | None:
        """The hand-over a panel left for this process, taken out of the environment (so read once); None if no
        panel asked for this restart. Raises HandoverError for one of another version or a malformed one."""
        raw = os.environ.pop(ENV, None)
        if not raw:
            return None
        try:
            data: Any = json.loads(raw)
        except ValueError as exc:
            raise HandoverError(f"the panel's hand-over is not JSON ({exc})") from exc
        version = data.get("version") if isinstance(data, dict) else None
        if version != VERSION:
            raise HandoverError(f"panel hand-over version {version!r}; this nb_cudaguard reads {VERSION}")
        try:
            buttons = {str(key): ButtonState(**b) for key, b in data.pop("buttons").items()}
            boxes = tuple(BoxState(**b) for b in data.pop("boxes"))
            return cls(
                root=str(data["root"]),
                body=str(data["body"]),
                actions=str(data["actions"]),
                plan=str(data["plan"]),
                plan_head=str(data["plan_head"]),
                status=str(data["status"]),
                output=str(data["output"]),
                copy_area=str(data["copy_area"]),
                buttons=buttons,
                boxes=boxes,
                html=str(data["html"]),
                plan_html=str(data["plan_html"]),
                markdown=str(data["markdown"]),
                asked=bool(data["asked"]),
                twin=str(data.get("twin", "")),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise HandoverError(f"the panel's hand-over lacks a valid {exc}") from exc


def withdraw() -> None:
    """The restart did not start: no process will look for the panel."""
    os.environ.pop(ENV, None)
