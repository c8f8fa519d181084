"""The fd route of the capture, on real file descriptors: nothing is stolen, lost, duplicated or reordered."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

import pytest

from nb_cudaguard.record.capture import OutputCapture, _FdTap
from nb_cudaguard.record.output import CellOutput

ASSERT_LINE = (
    "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1558: indexSelectLargeIndex: block: [1,0,0], "
    "thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
)


@pytest.fixture
def fd2_to_file():
    """Point fd 2 at a file (what the 'terminal' sees) and tap it, inside the test body: pytest re-points fd 2
    between a fixture's setup and the test, so this must run in the test itself."""

    @contextlib.contextmanager
    def setup():
        sink = tempfile.TemporaryFile()
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        capture = OutputCapture(limit=4096)
        capture._taps.append(_FdTap(2, "stderr", capture._sink))
        try:
            yield capture, sink
        finally:
            capture.detach()
            os.dup2(saved, 2)
            os.close(saved)

    return setup


def _seen(sink) -> bytes:
    sink.seek(0)
    return sink.read()


def test_output_reaches_the_terminal_once_in_order_and_is_captured(fd2_to_file):
    with fd2_to_file() as (capture, sink):
        capture.begin_cell()
        for n in range(2000):
            os.write(2, f"line {n}\n".encode())
        out = capture.end_cell(failed=True)
        expected = "".join(f"line {n}\n" for n in range(2000))
        assert _seen(sink).decode() == expected
        assert out.total == len(expected)
        assert out.text == expected[-4096:]


def test_assertion_lines_are_collected_even_when_split_across_writes(fd2_to_file):
    with fd2_to_file() as (capture, sink):
        capture.begin_cell()
        blob = "".join(ASSERT_LINE.format(t=t) for t in range(300)).encode()
        for start in range(0, len(blob), 77):  # chunk boundaries fall inside lines
            os.write(2, blob[start : start + 77])
        out = capture.end_cell(failed=True)
        [record] = out.assertions
        assert record.count == 300 and record.kernel == "indexSelectLargeIndex"
        assert _seen(sink) == blob


def test_non_utf8_bytes_pass_through_unchanged(fd2_to_file):
    with fd2_to_file() as (capture, sink):
        capture.begin_cell()
        raw = b"\xff\xfe bad bytes \xc3\x28 then text\n"
        os.write(2, raw)
        out = capture.end_cell(failed=True)
        assert _seen(sink) == raw
        assert "then text" in out.text and "\ufffd" in out.text


def test_large_output_is_not_lost_and_the_buffer_stays_bounded(fd2_to_file):
    with fd2_to_file() as (capture, sink):
        capture.begin_cell()
        block = b"y" * 65535 + b"\n"
        for _ in range(160):  # 10 MiB, far beyond a pipe's buffer
            os.write(2, block)
        out = capture.end_cell(failed=True)
        assert len(_seen(sink)) == 160 * len(block)
        assert out.total == 160 * len(block)
        assert len(out.text) <= 4096 + len(block)


def test_a_cell_that_redirects_fd2_wins_and_is_reported(fd2_to_file):
    with fd2_to_file() as (capture, _sink):
        capture.begin_cell()
        other = tempfile.TemporaryFile()
        os.dup2(other.fileno(), 2)  # the user's cell re-points stderr
        os.write(2, b"to the user's file\n")
        capture.end_cell(failed=False)
        other.seek(0)
        assert other.read() == b"to the user's file\n"
        assert capture.problems and "fd 2" in capture.problems[0]
        capture.begin_cell()  # disabled: does not take fd 2 back
        os.write(2, b"still the user's\n")
        capture.end_cell(failed=False)
        other.seek(0)
        assert other.read().endswith(b"still the user's\n")


def test_a_cell_that_closes_fd2_does_not_break_the_capture(fd2_to_file):
    with fd2_to_file() as (capture, _sink):
        capture.begin_cell()
        os.close(2)
        out = capture.end_cell(failed=True)
        assert out.total == 0
        assert capture.problems


def test_outside_cells_the_fd_is_the_users_own(fd2_to_file):
    with fd2_to_file() as (capture, _sink):
        before = os.fstat(2).st_ino
        capture.begin_cell()
        assert os.fstat(2).st_ino != before
        capture.end_cell(failed=False)
        assert os.fstat(2).st_ino == before


def test_cell_output_keeps_only_the_tail():
    out = CellOutput(limit=10)
    for n in range(100):
        out.add(f"{n:03d}\n")
    assert out.text == "098\n099\n"[-10:] or out.text.endswith("099\n")
    assert len(out.text) <= 10 and out.total == 400


@pytest.mark.parametrize("kind", [str, bytes])
def test_an_assertion_line_cut_anywhere_is_still_found(kind):
    line = ASSERT_LINE.format(t=0)
    for cut in range(1, len(line)):
        out = CellOutput()
        for piece in ("noise\n", line[:cut], line[cut:], "more noise\n"):
            out.add(piece if kind is str else piece.encode())
        out.finish()
        assert [r.count for r in out.assertions] == [1], cut
