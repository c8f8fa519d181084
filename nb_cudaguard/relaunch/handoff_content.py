"""What the old process tells the new one across the exec: the typed content of the signed handoff file.

``replay.handoff`` keeps the file safe (private directory, HMAC, read once); this module says what is in it. The old
process writes it in one place (``Handoff.to_document``) and the new one reads it in one place
(``Handoff.from_document``); ``version`` changes whenever a field changes meaning, and a handoff of another version
is refused whole rather than half understood.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.carry.manifest import CarryManifest, ManifestError
from nb_cudaguard.errors import NbCudaguardError
from nb_cudaguard.snapshot.files import SnapshotManifest, SnapshotManifestError

VERSION = 1


class HandoffContentError(ValueError, NbCudaguardError):
    """A signed handoff this nb_cudaguard cannot read (another version, a missing field): nothing in it runs."""


@dataclass(frozen=True)
class RestartOptions:
    """How the user asked for the restart."""

    replay: str  # "minimal" | "all" | "none"
    diagnose: bool  # re-run the failing cell under %%cudacheck after the replay
    method: str  # "exec" | "exit"
    carry: CarryManifest | None = None
    snapshot: SnapshotManifest | None = None  # the GPU state's snapshot file, and the training cells it replaces


@dataclass(frozen=True)
class SessionState:
    """The extension's own state, which no replayed cell rebuilds (the plan never replays nb_cudaguard's own
    commands): the simulated GPU, the checks around every cell, and the options set with ``%config CudaGuard.*``
    (only those that differ from their defaults). The new process sets them before it replays anything."""

    simulate: bool = False
    check: bool = False
    check_sync: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None  # the last incident's report (``Report.to_dict``): one report a session

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulate": self.simulate,
            "check": self.check,
            "check_sync": self.check_sync,
            "config": self.config,
            "report": self.report,
        }

    @classmethod
    def from_dict(cls, data: Any) -> SessionState:
        if data is None:  # a handoff written before the state was carried
            return cls()
        if not isinstance(data, dict) or not isinstance(data.get("config", {}), dict):
            raise HandoffContentError(f"the handoff's session state is not a mapping: {data!r}")
        report = data.get("report")
        if report is not None and not isinstance(report, dict):
            raise HandoffContentError(f"the handoff's report is not a mapping: {type(report).__name__}")
        return cls(
            bool(data.get("simulate")),
            bool(data.get("check")),
            bool(data.get("check_sync")),
            dict(data.get("config", {})),
            report,
        )


@dataclass(frozen=True)
class Handoff:
    plan: dict[str, Any]  # ReplayPlan.to_dict(): resolved against the journal in the new process
    journal: str  # Journal.to_json()
    options: RestartOptions
    pid: int
    execution_count: int
    restarts: int  # how many restarts this session has had, this one included
    requested_at: float
    how: str  # "exec" | "exit": how the process was replaced
    children_ended: tuple[str, ...] = ()
    pending: tuple[tuple[bytes, ...], ...] = ()  # shell requests kept during the restart, raw and still signed
    parent_header: dict[str, Any] | None = None  # the request that asked for the restart
    display_id: str | None = None  # the display its progress updates
    session: SessionState = field(default_factory=SessionState)
    subshells: tuple[str, ...] = ()  # ipykernel 7: the subshells clients had opened, recreated with the same ids
    version: int = field(default=VERSION)

    def to_document(self) -> dict[str, Any]:
        options = self.options
        return {
            "version": self.version,
            "plan": self.plan,
            "journal": self.journal,
            "options": {
                "replay": options.replay,
                "diagnose": options.diagnose,
                "method": options.method,
                "carry": options.carry.to_dict() if options.carry is not None else None,
                "snapshot": options.snapshot.to_dict() if options.snapshot is not None else None,
            },
            "pid": self.pid,
            "execution_count": self.execution_count,
            "restarts": self.restarts,
            "requested_at": self.requested_at,
            "how": self.how,
            "children_ended": list(self.children_ended),
            "pending": [[base64.b64encode(frame).decode("ascii") for frame in frames] for frames in self.pending],
            "parent_header": self.parent_header,
            "display_id": self.display_id,
            "session": self.session.to_dict(),
            "subshells": list(self.subshells),
        }

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> Handoff:
        if data.get("version") != VERSION:
            raise HandoffContentError(f"handoff version {data.get('version')!r}; this nb_cudaguard reads {VERSION}")
        try:
            raw = data["options"]
            carry = CarryManifest.from_dict(raw["carry"]) if raw.get("carry") else None
            snapshot = SnapshotManifest.from_dict(raw["snapshot"]) if raw.get("snapshot") else None
            options = RestartOptions(str(raw["replay"]), bool(raw["diagnose"]), str(raw["method"]), carry, snapshot)
            return cls(
                plan=dict(data["plan"]),
                journal=str(data["journal"]),
                options=options,
                pid=int(data["pid"]),
                execution_count=int(data["execution_count"]),
                restarts=int(data["restarts"]),
                requested_at=float(data["requested_at"]),
                how=str(data["how"]),
                children_ended=tuple(str(c) for c in data.get("children_ended", ())),
                pending=pending_requests(data),
                parent_header=data.get("parent_header"),
                display_id=data.get("display_id"),
                session=SessionState.from_dict(data.get("session")),
                subshells=tuple(str(s) for s in data.get("subshells", ())),
            )
        except (KeyError, TypeError, ValueError, ManifestError, SnapshotManifestError) as exc:
            raise HandoffContentError(f"the handoff lacks a valid {exc}") from exc


def pending_requests(data: dict[str, Any]) -> tuple[tuple[bytes, ...], ...]:
    """The kept requests of a handoff document, also of one that was refused (each is signed by its own client,
    so they can still be answered with an error without trusting the rest). Empty where they cannot be decoded."""
    try:
        return tuple(tuple(base64.b64decode(frame) for frame in frames) for frames in data.get("pending", []))
    except (TypeError, ValueError, AttributeError):
        return ()
