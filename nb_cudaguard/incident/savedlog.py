"""Read a saved run into the log it printed and the code that ran: a notebook file, Kaggle's log, or plain text.

Kaggle and Colab users often have no log to paste, only the notebook they saved (``.ipynb``) or the log Kaggle keeps
of a committed run (``kaggle kernels output`` writes it as a JSON list of ``{"stream_name", "time", "data"}``).
Read as text, either is JSON: the traceback's lines are escaped inside strings, so no frame and no exception line
is found. Read as what it is, a notebook gives more than a pasted log: the warnings and printouts of the cells
before the failing one (``Special tokens have been added``, a printed model's ``out_features``) and the code of
those cells, which the diagnosis reads as it reads ``--code``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SavedLog:
    """What a saved run says: the text it printed, the code that ran (None where the file has none), and the kind
    of file it was read as (``"notebook"``, ``"kaggle_log"``, ``"text"``)."""

    text: str
    code: str | None
    kind: str


def read_saved(raw: str) -> SavedLog:
    """The log and code in ``raw``; anything that is not a notebook or a Kaggle log is the log itself."""
    try:
        document = json.loads(raw)
    except ValueError:
        return SavedLog(raw, None, "text")
    if isinstance(document, dict) and isinstance(document.get("cells"), list):
        return _from_notebook(document["cells"])
    if isinstance(document, list) and document and all(_is_stream_record(item) for item in document):
        return SavedLog("".join(str(item["data"]) for item in document), None, "kaggle_log")
    return SavedLog(raw, None, "text")


def _is_stream_record(item: Any) -> bool:
    return isinstance(item, dict) and "data" in item and "stream_name" in item


def _joined(value: Any) -> str:
    """nbformat keeps multi-line strings either whole or as a list of lines."""
    return "".join(value) if isinstance(value, list) else str(value or "")


def _from_notebook(cells: list[Any]) -> SavedLog:
    """The code cells up to the last one that failed (all of them if none did): what they printed and their code.
    Displays are left out: they are rich views, and nb_cudaguard's own panel is one (its words are not evidence)."""
    code_cells = [cell for cell in cells if isinstance(cell, dict) and cell.get("cell_type") == "code"]
    failed = [i for i, cell in enumerate(code_cells) if any(_is_error(o) for o in cell.get("outputs") or [])]
    ran = code_cells[: failed[-1] + 1] if failed else code_cells
    printed: list[str] = []
    for cell in ran:
        for output in cell.get("outputs") or []:
            printed.append(_printed(output))
    sources = [_joined(cell.get("source")) for cell in ran]
    code = "\n\n".join(source for source in sources if source.strip())
    return SavedLog("".join(printed), code or None, "notebook")


def _is_error(output: Any) -> bool:
    return isinstance(output, dict) and output.get("output_type") == "error"


def _printed(output: Any) -> str:
    if not isinstance(output, dict):
        return ""
    kind = output.get("output_type")
    if kind == "stream":
        return _joined(output.get("text"))
    if kind == "execute_result":
        return _joined((output.get("data") or {}).get("text/plain")) + "\n"
    if kind == "error":
        return "\n".join(str(line) for line in output.get("traceback") or []) + "\n"
    return ""
