"""A GPU prints one assertion line per failing thread: the notebook shows the first few, the report counts them all.

Driven through real ipykernel kernels (jupyter_client), where C-level output reaches the cell through ipykernel's
fd-watch thread, and through ``Fold`` itself for the pieces a pipe cuts lines into.
"""

from __future__ import annotations

import json

import pytest

from nb_cudaguard.record.fold import NOTICE, Fold

LINE = (
    "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1236: indexSelectLargeIndex: block: [{b},0,0], thread: [{t},0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed."
)


def _lines(count: int) -> list[str]:
    return [LINE.format(b=n // 128, t=n % 128) for n in range(count)]


def test_the_first_lines_pass_then_one_notice_and_a_line_cut_in_two_is_never_half_shown():
    fold = Fold(keep=3)
    fold.begin()
    text = "".join(line + "\n" for line in _lines(50)) + "the user's own C-level line\n"
    shown = "".join(fold.pass_on(text[i : i + 1000]) for i in range(0, len(text), 1000)) + fold.end()
    assert shown.splitlines() == [*_lines(3), NOTICE.strip(), "the user's own C-level line"]


def test_output_without_an_assertion_passes_as_it_came_even_unfinished():
    fold = Fold(keep=3)
    fold.begin()
    assert fold.pass_on("progress 10%\r") == "progress 10%\r"  # never held back: no line ended yet
    assert fold.pass_on("".join(line + "\n" for line in _lines(2))) == "".join(line + "\n" for line in _lines(2))
    assert Fold(keep=0).pass_on(_lines(1)[0] + "\n") == _lines(1)[0] + "\n"


pytestmark_kernel = pytest.mark.kernel

BURST = (
    "import os, sys\n"
    f"line = {LINE!r}\n"
    "for n in range(5):\n"
    "    print(line.format(b=9, t=n), file=sys.stderr)  # Python's own output, before any C-level line\n"
    "sys.stderr.flush()\n"
    "burst = ''.join(line.format(b=n // 128, t=n % 128) + '\\n' for n in range(500)).encode()\n"
    "os.write(2, burst)\n"
    "os.write(2, b'after the burst\\n')\n"
    "raise RuntimeError('CUDA error: device-side assert triggered')\n"
)


@pytestmark_kernel
def test_a_burst_of_500_device_lines_shows_three_and_one_notice_and_the_report_counts_500(kernel):
    result = kernel.run(BURST)
    assert result.status == "error"
    lines = result.stderr.splitlines()
    python = [LINE.format(b=9, t=n) for n in range(5)]
    assert [line for line in lines if "block: [9," in line] == python  # what Python printed: never folded
    assert [line for line in lines if "srcSelectDimSize" in line and line not in python] == _lines(3), lines[:9]
    assert lines.count(NOTICE.strip()) == 1
    assert "after the burst" in lines  # the user's own C-level line after it
    report = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert len(report["assertions"]) == 1, report["assertions"]
    [record] = report["assertions"]
    assert record["count"] == 505 and record["condition"] == "srcIndex < srcSelectDimSize"
    again = kernel.run(BURST)  # the next cell shows its own first three
    assert [line for line in again.stderr.splitlines() if "block: [0," in line] == _lines(3)


@pytestmark_kernel
def test_with_the_option_at_zero_every_line_is_shown(kernel):
    assert kernel.run("%config CudaGuard.assertion_lines_shown = 0").status == "ok"
    result = kernel.run(BURST)
    device = [line for line in result.stderr.splitlines() if "srcSelectDimSize" in line]
    # ipykernel's watcher can drop a C-level line on its way (tests/test_extension_kernel.py measured 1 run in 15)
    assert len(device) >= 500 and NOTICE.strip() not in result.stderr
