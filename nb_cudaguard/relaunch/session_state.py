"""What a restart needs from the extension's session object (``CudaGuard``), as a protocol.

The restart sits below the shell-facing wiring in the import order, so it cannot import ``CudaGuard``; the session
passes itself in, and this protocol says which of its declared attributes the restart reads and writes.
"""

from __future__ import annotations

from typing import Any, Protocol

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.record.journal import CellRecord, Journal
from nb_cudaguard.relaunch.handoff_content import SessionState
from nb_cudaguard.relaunch.outcome import ReplayOutcome
from nb_cudaguard.snapshot.store import Snapshots


class CudaGuardState(Protocol):
    shell: Any
    journal: Journal
    carry: bool
    carry_max_bytes: int
    carry_max_seconds: float
    snapshot: bool
    snapshots: Snapshots
    journal_max_cells: int
    journal_max_bytes: int
    restarting: bool
    restarts: int
    restart_failure: str | None
    last_replay: ReplayOutcome | None

    @property
    def current_cell(self) -> CellRecord | None: ...

    def register(self) -> None: ...

    def unregister(self) -> None: ...

    def session_state(self) -> SessionState: ...

    def restore_session(self, state: SessionState) -> list[str]: ...

    def pin_report(self, diagnosis: Diagnosis, error: BaseException, cell: CellRecord) -> str | None: ...
