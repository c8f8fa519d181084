"""Journals built cell by cell, for the tests of the replay plan and the carry plan."""

from __future__ import annotations

from nb_cudaguard.record.journal import Journal


def journal_of(*cells) -> Journal:
    """``cells``: (source, seconds) for a successful cell, or (source, seconds, error text) for a failed one."""
    journal = Journal()
    for count, cell in enumerate(cells, 1):
        record = journal.start(cell[0], count)
        record.duration = cell[1]
        record.status = "error" if len(cell) > 2 else "ok"
        record.error = cell[2] if len(cell) > 2 else None
    return journal
