"""The journal: every cell the user ran, in order, with what it did, so that a restart can rebuild the session.

Only cheap facts are taken when a cell runs (source, status, timing). The def/use analysis runs on demand,
when a replay plan or a report needs it, so that recording costs a successful cell almost nothing.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from nb_cudaguard.errors import NbCudaguardError
from nb_cudaguard.record.cellnames import CellNames, analyse
from nb_cudaguard.record.observe import Observed

JOURNAL_FORMAT = 1
SKIP_MARKER = "# cudaguard: skip"


class JournalError(ValueError, NbCudaguardError):
    """A journal that cannot be read back (corrupt, truncated, or from an unknown format)."""


def cell_label(execution_count: int) -> str:
    """``[4]``: a cell as the user sees it, by the execution count beside it; the one spelling the report, the
    panel, the checks and the replay use (IPython's own tracebacks say ``In[4]``)."""
    return f"[{execution_count}]"


@dataclass
class CellRecord:
    seq: int
    execution_count: int | None
    source: str
    status: str = "running"  # ok | error | usage | interrupted | running | restart
    started: float = field(default_factory=time.time)
    duration: float = 0.0
    error: str | None = None
    cell_id: str | None = None
    transformed: str | None = None
    cuda: bool = False  # it failed with a CUDA error: the failure a restart rebuilds for (replay.plan.failing_cell)
    observed: Observed | None = None  # what the runtime saw it change (record.observe); None: not observed
    _names: CellNames | None = field(default=None, repr=False, compare=False)

    @property
    def names(self) -> CellNames:
        """The source's names, with what the runtime observed in place of the source's guesses: an object the
        runtime sees into changed only if it saw it change (whatever methods the cell called on it), and a module
        an optimizer stepped changed though the cell never named it."""
        if self._names is None:
            self._names = analyse(self.transformed if self.transformed is not None else self.source)
            if self.observed is not None:
                self._names.observe(self.observed)
        return self._names

    @property
    def first_line(self) -> str:
        for line in self.source.splitlines():
            if line.strip():
                return line.strip()
        return ""

    @property
    def skip_marked(self) -> bool:
        return SKIP_MARKER in self.source

    @property
    def label(self) -> str:
        return cell_label(self.execution_count) if self.execution_count is not None else f"#{self.seq}"

    def to_dict(self, with_names: bool = True) -> dict:
        data: dict[str, Any] = {
            "seq": self.seq,
            "execution_count": self.execution_count,
            "source": self.source,
            "transformed": self.transformed,
            "status": self.status,
            "started": datetime.fromtimestamp(self.started, timezone.utc).isoformat(),
            "duration": round(self.duration, 6),
            "error": self.error,
            "cell_id": self.cell_id,
            "cuda": self.cuda,
            "observed": self.observed.to_dict() if self.observed is not None else None,
        }
        if with_names:
            data["names"] = self.names.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CellRecord:
        return cls(
            seq=int(data["seq"]),
            execution_count=data.get("execution_count"),
            source=str(data["source"]),
            transformed=data.get("transformed"),
            status=str(data.get("status", "ok")),
            started=datetime.fromisoformat(data["started"]).timestamp(),
            duration=float(data.get("duration", 0.0)),
            error=data.get("error"),
            cell_id=data.get("cell_id"),
            cuda=bool(data.get("cuda", False)),
            observed=Observed.from_dict(data["observed"]) if data.get("observed") else None,
        )


class Journal:
    """Bounded: at most ``max_cells`` records and about ``max_bytes`` of source; the oldest go first."""

    def __init__(self, max_cells: int = 5000, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_cells = max_cells
        self.max_bytes = max_bytes
        self._cells: deque[CellRecord] = deque()
        self._bytes = 0
        self.dropped = 0
        self._next_seq = 1

    def __iter__(self) -> Iterator[CellRecord]:
        return iter(self._cells)

    def __len__(self) -> int:
        return len(self._cells)

    @property
    def last(self) -> CellRecord | None:
        return self._cells[-1] if self._cells else None

    def start(self, source: str, execution_count: int | None, cell_id: str | None = None) -> CellRecord:
        record = CellRecord(seq=self._next_seq, execution_count=execution_count, source=source, cell_id=cell_id)
        self._next_seq += 1
        self._append(record)
        return record

    def _append(self, record: CellRecord) -> None:
        self._cells.append(record)
        self._bytes += len(record.source)
        while len(self._cells) > 1 and (len(self._cells) > self.max_cells or self._bytes > self.max_bytes):
            old = self._cells.popleft()
            self._bytes -= len(old.source)
            self.dropped += 1

    def find(self, predicate: Callable[[CellRecord], bool]) -> list[CellRecord]:
        return [c for c in self._cells if predicate(c)]

    def by_seq(self, seq: int) -> CellRecord | None:
        return next((c for c in self._cells if c.seq == seq), None)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": JOURNAL_FORMAT,
                "dropped": self.dropped,
                "next_seq": self._next_seq,
                "cells": [c.to_dict(with_names=False) for c in self._cells],
            }
        )

    @classmethod
    def from_json(cls, text: str, max_cells: int = 5000, max_bytes: int = 32 * 1024 * 1024) -> Journal:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT:
                raise JournalError(f"unknown journal format {data.get('format') if isinstance(data, dict) else data!r}")
            journal = cls(max_cells=max_cells, max_bytes=max_bytes)
            for item in data["cells"]:
                journal._append(CellRecord.from_dict(item))
            journal.dropped += int(data.get("dropped", 0))
            journal._next_seq = max(int(data.get("next_seq", 1)), max((c.seq for c in journal), default=0) + 1)
            return journal
        except JournalError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise JournalError(f"the journal is corrupt and was not loaded ({type(exc).__name__}: {exc})") from exc
