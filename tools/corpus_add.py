"""Add gathered logs to the corpus of real logs, checking each entry before it lands.

    PYTHONPATH=. python tools/corpus_add.py PENDING.json [...]          # check, then append to corpus.json
    PYTHONPATH=. python tools/corpus_add.py --check PENDING.json [...]  # check only

A PENDING file is a JSON list of entries in corpus.json's shape (id, url, family, cause, confirmed_by,
confirmation, log, torch, library, kind, split and, where the thread gives the user's code, code), with the
log (and code) already written under tests/corpus/. The split is not a choice: it is fixed by a hash of the
source (``split_of``) so that no one picks which half a log lands in after reading it. An entry is refused when
its source or id is already in the corpus, its family is not one of the table's, its log is empty or carries no
CUDA error at all, or its split is not the one its source gives. Nothing is written unless every entry passes.

This script reads no diagnosis: whoever gathers logs labels them from the thread alone, before any rule sees them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

from nb_cudaguard.families import FAMILIES

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"  # the one place the tools find the corpus
CONFIRMATIONS = ("fix_worked", "maintainer", "thread", "assertion")
REQUIRED = ("id", "url", "family", "cause", "confirmed_by", "log", "split")
# Any CUDA error at all, in any era's wording: broader than the catalog on purpose, so that a log the catalog
# does not know still lands (that is what the corpus is for), while a log of something else does not.
_CUDA_ERROR = re.compile(r"cuda|cublas|cudnn|assert|illegal memory|AcceleratorError", re.IGNORECASE)


def split_of(url: str) -> str:
    """The half a log belongs to, fixed by its source before any rule is written for it (the 36 logs the rules were
    first written on, marked so in their ``note``, are ``dev`` whatever their hash)."""
    return ("dev", "held_out")[int(hashlib.sha256(url.encode()).hexdigest(), 16) % 2]


def entries() -> list[dict]:
    """The corpus's entries as they stand (the scoring and prior tools read them here, where they are written)."""
    return json.loads((CORPUS / "corpus.json").read_text())


def problems(entry: dict, known_ids: set[str], known_urls: set[str]) -> list[str]:
    """What is wrong with one pending entry; empty when it may land."""
    missing = [key for key in REQUIRED if not entry.get(key)]
    if missing:
        return [f"missing {', '.join(missing)}"]
    found = []
    if entry["id"] in known_ids:
        found.append("id already in the corpus")
    if entry["url"] in known_urls:
        found.append("source already in the corpus")
    if not entry["url"].startswith("https://github.com/"):
        found.append("source is not a GitHub thread")
    if entry["family"] not in FAMILIES:
        found.append(f"family {entry['family']!r} is not one of {', '.join(FAMILIES)}")
    if entry["confirmed_by"] not in CONFIRMATIONS:
        found.append(f"confirmed_by must be one of {', '.join(CONFIRMATIONS)}")
    if entry["split"] != split_of(entry["url"]):
        found.append(f"split must be {split_of(entry['url'])!r}: it follows from the source")
    log = CORPUS / entry["log"]
    text = log.read_text(errors="replace") if log.is_file() else ""
    if not text.strip():
        found.append(f"no log at {log}")
    elif not _CUDA_ERROR.search(text):
        found.append("the log carries no CUDA error")
    if "code" in entry and not (CORPUS / entry["code"]).is_file():
        found.append(f"no code at {CORPUS / entry['code']}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pending", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="check the entries, write nothing")
    args = parser.parse_args(argv)
    corpus = entries()
    ids, urls = {e["id"] for e in corpus}, {e["url"] for e in corpus}
    pending: list[dict] = []
    refused = 0
    for path in args.pending:
        for entry in json.loads(path.read_text()):
            found = problems(entry, ids, urls)
            if found:
                refused += 1
                print(f"{path}: {entry.get('id', '?')}: {'; '.join(found)}")
                continue
            ids.add(entry["id"])
            urls.add(entry["url"])
            pending.append(entry)
    counts = {s: sum(e["split"] == s for e in pending) for s in ("dev", "held_out")}
    print(f"{len(pending)} entries pass ({counts['dev']} dev, {counts['held_out']} held_out), {refused} refused")
    if refused or args.check:
        return 1 if refused else 0
    (CORPUS / "corpus.json").write_text(json.dumps(corpus + pending, indent=1, ensure_ascii=False) + "\n")
    print(f"corpus.json: {len(corpus)} -> {len(corpus) + len(pending)} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
