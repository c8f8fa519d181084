"""The device assertion lines a failing kernel prints, read out of a stream of output into deduplicated records.

CUDA prints one ``file:line: kernel: block: [..], thread: [..] Assertion `cond` failed.`` per failing thread, from
C, to the process's file descriptors; the capture feeds every line here while a cell runs, and ``explain`` feeds a
pasted log. What a record means (its cause family) is the catalog's business, not this module's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# The printed device line (torch_cuda_errors.md, section g). Greedy on the condition: the multinomial
# message itself contains backticks. ROCm/HIP prints ``Device-side assertion `cond' failed.``. A path never holds a
# ``]``: a progress bar's ``5.51s/it]`` printed on the same line stays out of the file's name. The file starts where
# such a run of characters starts (the lookbehind): the same matches, found in one pass over a long line instead of
# a scan from every position of it.
FILE_START = r"(?<![^\s:\]])"
_ASSERT_LINE = re.compile(
    FILE_START + r"(?P<file>[^\s:\]]+?):(?P<line>\d+): (?P<kernel>.+?): block: \[(?P<block>\d+,\s*\d+,\s*\d+)\],"
    r" thread: \[(?P<thread>\d+,\s*\d+,\s*\d+)\] Assertion `(?P<condition>.*)` failed\."
)
_HIP_ASSERT_LINE = re.compile(
    FILE_START
    + r"(?P<file>[^\s:\]]+?):(?P<line>\d+): (?P<kernel>.+?): Device-side assertion `(?P<condition>.*)' failed\."
)


@dataclass
class AssertionRecord:
    """One distinct device assertion, however many threads printed it."""

    file: str
    line: int
    kernel: str
    condition: str
    block: str = ""
    thread: str = ""
    count: int = 1

    @property
    def key(self) -> tuple[str, int, str, str]:
        return (self.file, self.line, self.kernel, self.condition)

    @property
    def short_file(self) -> str:
        marker = "aten/src/"
        return self.file[self.file.find(marker) :] if marker in self.file else self.file

    def to_text(self) -> str:
        times = f" (printed {self.count}x)" if self.count > 1 else ""
        return f"{self.short_file}:{self.line} in {self.kernel}: `{self.condition}` failed{times}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class AssertionCollector:
    """Turns a stream of output lines into deduplicated assertion records, bounded in size."""

    def __init__(self, max_distinct: int = 64) -> None:
        self.max_distinct = max_distinct
        self._records: dict[tuple[str, int, str, str], AssertionRecord] = {}
        self.dropped = 0

    def feed_line(self, line: str) -> None:
        match = _ASSERT_LINE.search(line) or _HIP_ASSERT_LINE.search(line)
        if match is None:
            return
        groups = match.groupdict()
        record = AssertionRecord(
            file=groups["file"],
            line=int(groups["line"]),
            kernel=groups["kernel"],
            condition=groups["condition"],
            block=(groups.get("block") or "").replace(" ", ""),
            thread=(groups.get("thread") or "").replace(" ", ""),
        )
        known = self._records.get(record.key)
        if known is not None:
            known.count += 1
        elif len(self._records) < self.max_distinct:
            self._records[record.key] = record
        else:
            self.dropped += 1

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            if "ssert" in line:
                self.feed_line(line)

    @property
    def records(self) -> list[AssertionRecord]:
        return list(self._records.values())


def is_assertion_line(line: str) -> bool:
    """Whether ``line`` is one printed device assertion (what ``fold`` may leave out of the notebook)."""
    return "ssert" in line and bool(_ASSERT_LINE.search(line) or _HIP_ASSERT_LINE.search(line))


def parse_assertions(text: str) -> list[AssertionRecord]:
    collector = AssertionCollector()
    collector.feed_text(text)
    return collector.records
