"""The panel's hand-over across its own restart: which widgets to reopen, and the report to copy again.

It travels in an environment variable (an exec keeps the environment), written in one place (``to_env``, by the
process that drew the panel) and read in one place (``from_env``, once, by the new process). ``version`` changes
whenever a field changes meaning; a hand-over of another version, or one that cannot be parsed, is refused whole
(an upgrade installed between the two processes can do that) rather than half understood.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.errors import NbCudaguardError

ENV = "NB_CUDAGUARD_PANEL"
VERSION = 1
MARKDOWN_LIMIT = 64 * 1024  # one environment string may hold 128 KiB on Linux


class HandoverError(ValueError, NbCudaguardError):
    """A panel hand-over this nb_cudaguard cannot read: the old panel is left as it is."""


@dataclass(frozen=True)
class ButtonState:
    """A button as the frontend shows it: the new process recreates it with the same look, disabled."""

    model_id: str
    description: str
    button_style: str
    icon: str


@dataclass(frozen=True)
class PanelHandover:
    status: str  # the model ids of the status line, the output area and the copy box
    output: str
    copy_area: str
    buttons: dict[str, ButtonState]  # by the panel's key for each ("replay", "copy", ...)
    markdown: str  # the report, for "Copy report"; cut at MARKDOWN_LIMIT
    version: int = field(default=VERSION)

    def to_env(self) -> None:
        buttons = {
            key: {"id": b.model_id, "description": b.description, "button_style": b.button_style, "icon": b.icon}
            for key, b in self.buttons.items()
        }
        os.environ[ENV] = json.dumps(
            {
                "version": self.version,
                "status": self.status,
                "output": self.output,
                "copy_area": self.copy_area,
                "buttons": buttons,
                "markdown": self.markdown[:MARKDOWN_LIMIT],
            }
        )

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
            buttons = {
                str(key): ButtonState(str(b["id"]), str(b["description"]), str(b["button_style"]), str(b["icon"]))
                for key, b in data["buttons"].items()
            }
            return cls(
                status=str(data["status"]),
                output=str(data["output"]),
                copy_area=str(data["copy_area"]),
                buttons=buttons,
                markdown=str(data["markdown"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise HandoverError(f"the panel's hand-over lacks a valid {exc}") from exc


def withdraw() -> None:
    """The restart did not start: no process will look for the panel."""
    os.environ.pop(ENV, None)
