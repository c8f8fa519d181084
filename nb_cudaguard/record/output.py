"""What one cell wrote, kept small: a bounded tail of its output and every distinct device assertion in it.

The capture (``record/capture.py``) feeds every piece a cell writes here, on the thread that forwards it; the report
reads the tail and the assertions once the cell has failed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TypeVar

from nb_cudaguard.record.assertions import AssertionCollector, AssertionRecord


@dataclass
class CellOutput:
    """What one cell wrote, kept small: the last ``limit`` characters and every distinct assertion.

    ``add`` runs for every write the user makes (ipykernel forwards C-level output in 1000-byte pieces), so it only
    appends; pieces are joined, scanned for assertion lines and trimmed in batches of ``_BATCH`` characters, and
    decoded only when the report reads them.
    """

    limit: int = 64 * 1024
    chunks: deque = field(default_factory=deque)
    size: int = 0
    total: int = 0
    collector: AssertionCollector = field(default_factory=AssertionCollector)
    _pending: list = field(default_factory=list)
    _pending_size: int = 0
    _partial: str | bytes = ""

    def add(self, chunk: str | bytes) -> None:
        if self._pending and type(chunk) is not type(self._pending[0]):
            self._settle()
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        if self._pending_size >= _BATCH:
            self._settle()

    def _settle(self) -> None:
        if not self._pending:
            return
        block = self._pending[0][:0].join(self._pending)
        self._pending, self._pending_size = [], 0
        self.total += len(block)
        self._scan(block)
        self.chunks.append(block[-self.limit :])
        self.size += len(self.chunks[-1])
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())

    def _scan(self, block: str | bytes) -> None:
        """Feed the complete lines that hold an assertion; carry the unfinished last line into the next block."""
        marked: str | bytes | None
        if isinstance(block, str):
            partial = self._partial if type(self._partial) is str else ""
            marked, self._partial = _marked_lines(partial, block, "\n", _STR_MARKER)
        else:
            raw = self._partial if type(self._partial) is bytes else b""
            marked, self._partial = _marked_lines(raw, block, b"\n", _BYTES_MARKER)
        if marked is not None:
            self.collector.feed_text(_as_text(marked))

    def finish(self) -> None:
        self._settle()
        if self._partial:
            self.collector.feed_text(_as_text(self._partial))
            self._partial = ""

    @property
    def text(self) -> str:
        self._settle()
        parts: list[str] = []
        raw: list[bytes] = []  # consecutive byte chunks are decoded together, so no character is cut in two
        for chunk in self.chunks:
            if isinstance(chunk, bytes):
                raw.append(chunk)
                continue
            if raw:
                parts.append(_as_text(b"".join(raw)))
                raw = []
            parts.append(chunk)
        if raw:
            parts.append(_as_text(b"".join(raw)))
        return "".join(parts)[-self.limit :]

    @property
    def assertions(self) -> list[AssertionRecord]:
        self.finish()
        return self.collector.records


_BATCH = 256 * 1024
_Text = TypeVar("_Text", str, bytes)
_STR_MARKER, _BYTES_MARKER = "ssert", b"ssert"


def _marked_lines(partial: _Text, block: _Text, newline: _Text, marker: _Text) -> tuple[_Text | None, _Text]:
    """The complete lines of ``partial + block`` if they hold ``marker`` (else None), and the unfinished last line.
    Most blocks hold no marker: then only the block's last line is looked for."""
    if marker not in block and marker not in partial[-8:] + block[:8]:
        _, found, rest = block.rpartition(newline)
        return None, (rest if found else partial + block)[-4096:]
    complete, found, rest = (partial + block).rpartition(newline)
    return (complete if found and marker in complete else None), (rest if found else complete)[-4096:]


def _as_text(chunk: str | bytes) -> str:
    return chunk if isinstance(chunk, str) else chunk.decode("utf-8", errors="replace")
