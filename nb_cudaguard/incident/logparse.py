"""Read an error log a user already has (a traceback copied from Kaggle, Colab, a terminal) into an Incident.

Logs come in many shapes: plain Python tracebacks, IPython 7 (``<ipython-input-5-...> in <module>`` and
``----> 3`` arrows), IPython 8+ (``Cell In[5], line 3``), with ANSI colours, with or without the device's
assertion lines. We take what is there and say what is missing rather than guess.
"""

from __future__ import annotations

import re

from nb_cudaguard.incident.incident import Frame, Incident, classify
from nb_cudaguard.incident.pasted import unpasted
from nb_cudaguard.incident.probe import Health
from nb_cudaguard.incident.usercode import is_user_file_in_log
from nb_cudaguard.record.assertions import AssertionRecord, parse_assertions

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Colab prints each frame's file as a link: ``[/usr/lib/python3/torch/nn/functional.py](https://localhost:8080/#) in``
_LINKED_FILE = re.compile(r"\[([^\]\n]{1,300})\]\(https?://[^)\s]{0,300}\)")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):\s?(?P<msg>.*)$")
_PY_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
_IPY8_CELL = re.compile(r"^\s*Cell In\s?\[(?P<cell>\d*)\], line (?P<line>\d+)")
_IPY7_CELL = re.compile(r"^\s*<ipython-input-(?P<cell>\d+)-[0-9a-f]+> in (?P<func>\S+)")
_ARROW = re.compile(r"^\s*-+>\s*(?P<line>\d+)\s(?P<code>.*)$")
# A library frame as IPython prints it: 8+ ``File /path/x.py:123, in func(args)``; 7 ``/path/x.py in func(args)``
# followed by the ``--> 123 code`` arrow.
_IPY8_FILE = re.compile(r"^\s*File (?P<file>[^\s\"]+\.py):(?P<line>\d+), in (?P<func>[\w.<>]+)")
_IPY7_FILE = re.compile(r"^\s*(?P<file>(?:/|[A-Za-z]:\\)[^\s\"]+\.py) in (?P<func>[\w.<>]+)\(")
# One printed assertion per failing thread: a bad batch prints thousands of copies of a few lines.
_KEPT_CHARACTERS = 256 * 1024
_HEADER = re.compile(r"^\s*[A-Za-z_][\w.]*\s{3,}Traceback \(most recent call last\)")


def _strip(text: str) -> str:
    return _LINKED_FILE.sub(r"\1", unpasted(_ANSI.sub("", text).replace("\r\n", "\n")))


def _condense(lines: list[str]) -> tuple[list[str], list[AssertionRecord]]:
    """The log with each assertion printed once (its copies differ only in block and thread), and the assertion
    records with their counts: the text the catalog reads stays small however many threads failed."""
    copies: dict[str, list] = {}  # the line without its coordinates -> [the first such line, how many]
    kept = []
    for line in lines:
        start, end = line.find(": block: ["), line.find("] Assertion")
        if start >= 0 and end > start:
            key = line[:start] + line[end:]
            if key in copies:
                copies[key][1] += 1
                continue
            copies[key] = [line, 1]
        kept.append(line)
    records = {record.key: record for record in parse_assertions("\n".join(kept))}
    for first, count in copies.values():
        for record in parse_assertions(first):
            if record.key in records:
                records[record.key].count += count - 1
    return kept, list(records.values())


def _bounded(text: str) -> str:
    """At most ``_KEPT_CHARACTERS``: the head (warnings, the assertion lines) and the tail (the exception)."""
    if len(text) <= _KEPT_CHARACTERS:
        return text
    half = _KEPT_CHARACTERS // 2
    return f"{text[:half]}\n...\n{text[-half:]}"


def _exception(lines: list[str]) -> tuple[str, str]:
    """The last ``Type: message`` line, with the message lines that follow it."""
    for index in range(len(lines) - 1, -1, -1):
        match = _EXC_LINE.match(lines[index].strip())
        if match and not _HEADER.match(lines[index]):
            rest = []
            for follow in lines[index + 1 :]:
                if not follow.strip() or _PY_FRAME.match(follow) or _EXC_LINE.match(follow.strip()):
                    break
                rest.append(follow.strip())
            return match["type"], "\n".join([match["msg"], *rest]).strip()
    return "", ""


def _forward_slashes(filename: str) -> str:
    """A Windows path as the rules read paths (``site-packages/transformers/``): the drive stays, a valid path."""
    return filename.replace("\\", "/")


def _frames(lines: list[str]) -> list[Frame]:
    frames: list[Frame] = []
    for index, line in enumerate(lines):
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        match = _PY_FRAME.match(line)
        if match:
            filename = _forward_slashes(match["file"])
            frames.append(Frame(filename, int(match["line"]), match["func"], following, is_user_file_in_log(filename)))
            continue
        match = _IPY8_FILE.match(line) or _IPY7_FILE.match(line)
        if match:
            filename = _forward_slashes(match["file"])
            lineno, code = int(match.groupdict().get("line") or 0), ""
            for look in lines[index + 1 : index + 12]:
                arrow = _ARROW.match(look)
                if arrow:
                    lineno, code = int(arrow["line"]), arrow["code"].strip()
                    break
                if _IPY8_FILE.match(look) or _IPY7_FILE.match(look) or _IPY8_CELL.match(look):
                    break
            frames.append(Frame(filename, lineno, match["func"], code, is_user_file_in_log(filename)))
            continue
        match = _IPY8_CELL.match(line) or _IPY7_CELL.match(line)
        if match:
            cell = int(match["cell"]) if match["cell"] else None
            lineno = int(match.groupdict().get("line") or 0)
            code = ""
            for look in lines[index + 1 : index + 12]:
                arrow = _ARROW.match(look)
                if arrow:
                    lineno, code = int(arrow["line"]), arrow["code"].strip()
                    break
            frames.append(Frame(f"In[{cell}]", lineno, "<module>", code, True, cell))
    return frames


def incident_from_log(text: str) -> Incident:
    clean = _strip(text)
    lines, assertions = _condense(clean.splitlines())
    clean = _bounded("\n".join(lines))
    lines = clean.splitlines()
    exc_type, message = _exception(lines)
    health = Health("unknown", "read from a log: the context could not be probed", source="log")
    return Incident(
        exc_type=exc_type or "(no exception found)",
        message=message,
        classification=classify(clean, assertions, health),
        health=health,
        frames=_frames(lines),
        assertions=assertions,
        output_tail=clean,
    )
