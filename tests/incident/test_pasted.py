"""A log reads the same however it was pasted: quoted in a reply, teed by torchrun, copied from Kaggle's log viewer,
broken by a terminal's width. Checked on strings in each shape and on every dev log of the corpus re-pasted."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from nb_cudaguard.diagnosis import diagnose
from nb_cudaguard.incident.logparse import incident_from_log
from nb_cudaguard.incident.pasted import unpasted

ASSERT_LINE = (
    "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], "
    "thread: [{t},0,0] Assertion `t >= 0 && t < n_classes` failed."
)
LOG = "\n".join(
    [
        *(ASSERT_LINE.format(t=t) for t in range(3)),
        "Traceback (most recent call last):",
        '  File "/content/train.py", line 41, in <module>',
        "    loss = criterion(logits, labels)",
        '  File "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/loss.py", line 1174, in forward',
        "    return F.cross_entropy(input, target, weight=self.weight,",
        "RuntimeError: CUDA error: device-side assert triggered",
    ]
)


def _read(text: str) -> tuple[str, str, int, list[str]]:
    incident = incident_from_log(text)
    return incident.exc_type, incident.message, len(incident.assertions), [f.filename for f in incident.frames]


def test_a_quoted_log_reads_as_the_log_and_a_python_prompt_keeps_its_chevrons():
    quoted = "\n".join("> " + line for line in LOG.splitlines())
    assert _read(quoted) == _read(LOG)
    assert _read(LOG)[2] == 1 and len(_read(LOG)[3]) == 2  # the same assertion three times, two frames
    twice = "\n".join("> > " + line for line in LOG.splitlines())
    assert _read(twice) == _read(LOG)
    assert unpasted(">>> import torch\n>>> torch.cuda.is_available()\nTrue") == (
        ">>> import torch\n>>> torch.cuda.is_available()\nTrue"
    )


def test_one_quoted_line_inside_a_log_is_the_log_s_own_text():
    text = "Epoch 1\n> this line is the program's own output\nTraceback (most recent call last):\nValueError: x"
    assert unpasted(text) == text


def test_torchrun_rank_prefixes_and_kaggle_viewer_columns_are_removed():
    ranked = "\n".join(f"[rank{i % 2}]: {line}" for i, line in enumerate(LOG.splitlines()))
    assert _read(ranked) == _read(LOG)
    older = "\n".join(f"[default0]:{line}" for line in LOG.splitlines())
    assert _read(older) == _read(LOG)
    kaggle = "\n".join(f"{3.1 + i:.1f}s\t{i + 1}\t{line}" for i, line in enumerate(LOG.splitlines()))
    assert _read(kaggle) == _read(LOG)


def test_a_terminal_s_broken_lines_are_joined_and_whole_lines_of_the_same_width_are_not():
    width = 80
    broken = "\n".join(line[i : i + width] for line in LOG.splitlines() for i in range(0, len(line) or 1, width))
    assert broken != LOG and _read(broken) == _read(LOG)
    assert unpasted(broken) == LOG
    same_width = "\n".join(ASSERT_LINE.format(t=t) for t in range(100, 103))  # three whole lines, one width
    assert unpasted(same_width) == same_width


def test_an_assertion_broken_anywhere_after_its_keyword_is_whole_again():
    line = ASSERT_LINE.format(t=7)
    cut = line.index("n_classes")
    assert _read(f"{line[:cut]}\n{line[cut:]}\nRuntimeError: CUDA error: device-side assert triggered")[2] == 1
    assert unpasted(f"{line[:cut]}\n{line[cut:]}") == line
    assert unpasted(f"{line[:cut]}\n\n{line[cut:]}\n\nnext") == f"{line}\n\nnext"  # a blank line between pieces


# Every dev log of the corpus, re-pasted: the diagnosis must rank the same family first.
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
DEV = [e for e in json.loads((CORPUS / "corpus.json").read_text()) if e["split"] == "dev"]


def _wrapped(width: int) -> Callable[[str], str]:
    return lambda text: "\n".join(
        line[i : i + width] for line in text.splitlines() for i in range(0, max(len(line), 1), width)
    )


def _on_windows(text: str) -> str:
    """Every source path as a Windows machine prints it (``C:\\...\\site-packages\\torch\\nn\\functional.py``)."""
    return re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]+\.py", lambda m: "C:" + m[0].replace("/", "\\"), text)


PASTES: dict[str, tuple[Callable[[str], str], int]] = {  # how the log is re-pasted, how many top families may move
    "quoted": (lambda text: "\n".join("> " + line for line in text.splitlines()), 0),
    "torchrun": (lambda text: "\n".join(f"[rank{i % 2}]: {line}" for i, line in enumerate(text.splitlines())), 0),
    "kaggle": (lambda text: "\n".join(f"{i / 3:.1f}s\t{i + 1}\t{line}" for i, line in enumerate(text.splitlines())), 0),
    "windows": (lambda text: _on_windows(text).replace("\n", "\r\n"), 0),
    # A single line broken once gives no width to find the break by: a log of one long non-assertion line may move.
    "terminal_100": (_wrapped(100), 1),
    "quoted_terminal_80": (lambda text: "\n".join("> " + line for line in _wrapped(80)(text).splitlines()), 1),
}


def _top(text: str, code: str | None) -> str | None:
    causes = diagnose(incident_from_log(text), code=code).causes
    return causes[0].family if causes else None


@pytest.mark.parametrize("paste", PASTES)
def test_every_dev_log_ranks_the_same_family_first_however_it_was_pasted(paste):
    transform, allowed = PASTES[paste]
    moved = []
    for entry in DEV:
        log = (CORPUS / entry["log"]).read_text()
        code = (CORPUS / entry["code"]).read_text() if entry.get("code") else None
        original, pasted = _top(log, code), _top(transform(log), code)
        assert pasted is not None, entry["id"]  # a CUDA error never loses its causes
        if pasted != original:
            moved.append(entry["id"])
    assert len(moved) <= allowed, moved


def test_a_path_a_terminal_broke_is_whole_again_though_no_other_line_shows_the_width():
    line = "RuntimeError: cuda runtime error (59) : device-side assert triggered at /pytorch/aten/src/THC/generic/THCTensorScatterGather.cu:67"
    assert unpasted(f"{line[:100]}\n{line[100:]}") == line
    whole_file = f"{'x' * 60} /data/ssd/layers/modules/multibox_loss.py\nc.py is the next line"
    assert unpasted(whole_file) == whole_file  # a file name already whole ends its path
    assert unpasted(f"{line[:80]}\n{line[80:]}") == line  # broken before a `/`: the rest of the path is the whole line
    assertion = ASSERT_LINE.format(t=7)
    assert unpasted(f"{'x' * 60} at /data/run1\n{assertion}") == f"{'x' * 60} at /data/run1\n{assertion}"
