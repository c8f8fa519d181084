"""Write ``nb_cudaguard/data/priors.json``: how often each family caused each symptom in the corpus's dev half.

    PYTHONPATH=. python tools/build_priors.py

Only entries with ``split == "dev"`` are read (the held-out half is filtered out before any log is opened), so
the held-out figures in docs/diagnosis.md measure logs the prior has never seen. Each dev log gives one row: its
symptom and kinds of model as ``diagnosis.evidence.prior`` reads them, and the family its thread confirmed.
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus_add import CORPUS, entries

from nb_cudaguard.diagnosis.evidence import prior
from nb_cudaguard.incident.logparse import incident_from_log

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "nb_cudaguard" / "data" / "priors.json"


def dev_rows() -> list[tuple[str, tuple[str, ...], str]]:
    rows = []
    for entry in (e for e in entries() if e["split"] == "dev"):
        incident = incident_from_log((CORPUS / entry["log"]).read_text())
        rows.append((prior.symptom_of(incident), prior.domains_of(incident), entry["family"]))
    return rows


def main() -> None:
    rows = dev_rows()
    table = {"built_from": f"tests/corpus/corpus.json, dev half ({len(rows)} logs)", **prior.tally(rows)}
    TARGET.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {TARGET.relative_to(ROOT)} from {len(rows)} dev logs")


if __name__ == "__main__":
    main()
