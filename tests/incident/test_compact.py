"""A CUDA failure's traceback in a real IPython shell: the user's frames and the error's line, the library frames
and PyTorch's advice folded, the whole one printed again by ``%tb``; every other error keeps IPython's own."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

FAILING = (
    "import torch.nn.functional as F\n"
    "logits = torch.randn(4, 3, device='cuda')\n"
    "labels = torch.tensor([0, 1, 2, 3], device='cuda')\n"
    "loss = F.cross_entropy(logits, labels)\n"
)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def _failing_cell_output(shell, capsys) -> str:
    shell.run_cell("import torch\n%cudaguard simulate on", store_history=True)
    capsys.readouterr()
    shell.run_cell(FAILING, store_history=True)
    return _plain(capsys.readouterr().out)


def test_a_cuda_error_shows_the_users_frames_and_its_line_and_tb_prints_it_whole(shell, capsys):
    shown = _failing_cell_output(shell, capsys)
    traceback, _, rest = shown.partition("CUDA error: device-side assert triggered")
    assert "----> 4 loss = F.cross_entropy(logits, labels)" in traceback  # the user's line
    assert "3 labels = torch.tensor" in traceback and "import torch.nn.functional" not in traceback  # and its neighbour
    assert "functional.py" not in traceback  # torch's frame is folded
    assert "nb_cudaguard" not in traceback
    assert "Search for `cudaErrorAssert'" not in shown and "CUDA_LAUNCH_BLOCKING=1\n" not in shown
    assert (
        "nb_cudaguard folded library frames and PyTorch's CUDA advice out of this traceback: %tb prints it whole"
        in rest
    )

    shell.run_line_magic("tb", "")
    full = _plain(capsys.readouterr().out)
    assert "functional.py" in full and "loss = F.cross_entropy(logits, labels)" in full
    assert "Search for `cudaErrorAssert'" in full and "For debugging consider passing CUDA_LAUNCH_BLOCKING=1" in full
    assert "testing" not in full  # the simulation's frames stay hidden in the full one too


def test_the_full_traceback_is_one_click_away_in_html(shell):
    from nb_cudaguard.incident.compact import FULL_CLASS, fold

    shell.run_cell("import torch\n%cudaguard simulate on", store_history=True)
    result = shell.run_cell(FAILING, store_history=True)
    error = result.error_in_exec
    folded = fold(shell, type(error), error, error.__traceback__)
    assert folded is not None
    page = folded.bundle()["text/html"]
    assert page.startswith(f'<details class="{FULL_CLASS}"><summary')
    assert "functional.py" in page and "CUDA_LAUNCH_BLOCKING=1" in page
    assert "\x1b[" not in page


def _without_counts(text: str) -> str:
    return re.sub(r"In\[\d+\]|<ipython-input-\d+-\w+>|line \d+|/tmp/\S+\.py", "#", text)


def test_every_other_error_keeps_ipythons_own_traceback(shell, capsys):
    cell = "import torch\ntorch.zeros(6).view(4)\n"  # a RuntimeError from torch, no CUDA in it
    shell.run_cell(cell, store_history=True)
    with_extension = capsys.readouterr().out
    shell.run_line_magic("unload_ext", "nb_cudaguard")
    try:
        shell.run_cell(cell, store_history=True)
        without = capsys.readouterr().out
    finally:
        shell.run_line_magic("load_ext", "nb_cudaguard")
    assert "shape '[4]' is invalid" in with_extension
    assert _without_counts(with_extension) == _without_counts(without)


def test_a_handler_of_the_users_is_left_alone(shell, capsys):
    seen = []
    shell.run_line_magic("unload_ext", "nb_cudaguard")
    shell.set_custom_exc((RuntimeError,), lambda *args, **kwargs: seen.append(args[2]))
    try:
        shell.run_line_magic("load_ext", "nb_cudaguard")
        shell.run_cell("raise RuntimeError('mine')", store_history=True)
        assert [str(e) for e in seen] == ["mine"]
        shell.run_line_magic("unload_ext", "nb_cudaguard")
        assert shell.custom_exceptions == (RuntimeError,)  # still the user's
    finally:
        shell.set_custom_exc((), None)
        shell.run_line_magic("load_ext", "nb_cudaguard")
