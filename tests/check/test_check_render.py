"""How IPython shows a check's error: a compact block with the user's own frames, in a real IPython shell.

The model's ``forward`` is defined in an earlier cell and the op fails inside it, so the user's line (the line of
the running cell) and where it failed (``forward``) differ, and torch's and nb_cudaguard's frames sit between them.
"""

from __future__ import annotations

import re

import IPython
import pytest

torch = pytest.importorskip("torch")

from IPython.utils.capture import capture_output  # noqa: E402

from nb_cudaguard import CudaCheckError  # noqa: E402

MODEL = """import torch
from torch import nn
class M(nn.Module):
    def __init__(self, vocab=10):
        super().__init__()
        self.emb = nn.Embedding(vocab, 4)
    def forward(self, tokens):
        return self.emb(tokens)
m = M()
ids = torch.tensor([1, 2, 12])
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NOT_THE_USER_S = ("site-packages", "torch/nn", "nb_cudaguard/check", "run_cell_magic", "cell_end", "__torch_dispatch__")


def _run(shell, cell: str) -> tuple[BaseException, str]:
    """Run ``cell`` after the model's cell; the error and what IPython printed for it."""
    assert shell.run_cell(MODEL, store_history=True).success
    with capture_output() as shown:
        result = shell.run_cell(cell, store_history=True)
    assert result.error_in_exec is not None
    return result.error_in_exec, shown.stdout + shown.stderr


def _cell(text: str | None, before: str, after: str) -> int:
    """The cell number in ``text``, which must read ``before`` + number + ``after``."""
    found = re.fullmatch(re.escape(before) + r"(\d+)" + re.escape(after), text or "")
    assert found is not None, text
    return int(found.group(1))


@pytest.fixture
def colours(shell):
    before = shell.colors
    yield shell
    shell.run_line_magic("colors", before)
    shell.run_line_magic("xmode", "context")


def test_cudacheck_error_is_a_compact_block_of_the_user_s_frames(shell) -> None:
    err, shown = _run(shell, "%%cudacheck\nout = m(ids)\n")
    assert isinstance(err, CudaCheckError)
    cell = _cell(err.user_line, "cell [", "], line 2: out = m(ids)")  # the running cell's line, not forward's
    assert err.via is not None and "return self.emb(tokens)" in err.via
    assert _cell(err.via, "M.forward, cell [", "], line 8: return self.emb(tokens)") < cell
    lines = ANSI.sub("", shown).strip().splitlines()
    assert lines[0] == (
        f"CudaCheckError: aten.embedding: argument indices (ids) has 1 value(s) outside [0, 10): 12 at [2]; "
        f"at cell [{cell}], line 2: out = m(ids)"
    )
    frames = lines[1:-3]
    assert frames[frames.index("----> 2 out = m(ids)") + 2 :][0].endswith(
        ("M.forward(self, tokens)", "forward(self, tokens)")
    )
    assert [line for line in frames if re.fullmatch(r"----> 8 +return self\.emb\(tokens\)", line)]
    if IPython.version_info[0] >= 8:  # IPython 7 names the cell by its file, <ipython-input-N-hash>
        assert frames[0] == f"Cell In[{cell}], line 2"
    assert not [line for line in lines if any(word in line for word in NOT_THE_USER_S)]
    assert lines[-3].startswith("  valid: [0, 10) (from m.emb.num_embeddings = 10)")
    assert lines[-2].startswith("  fix: ") and "the CUDA context is healthy" in lines[-1]
    assert len(lines) <= 16, shown  # IPython 7 shows two more lines of context per frame
    # str() stays the whole message, for code that logs or parses it
    assert "  offending values: 12 at [2]" in str(err)
    assert f"  at: cell [{cell}], line 2: out = m(ids) (via M.forward, cell [" in str(err)


def test_the_block_keeps_ipython_s_colours_and_exception_modes(colours) -> None:
    shell = colours
    shell.run_line_magic("colors", "linux" if IPython.version_info[0] >= 9 else "Linux")
    err, shown = _run(shell, "%%cudacheck\nout = m(ids)\n")
    own = shell.InteractiveTB.structured_traceback(type(err), err, err.__traceback__)[-1]
    coloured_name = own[: own.index(str(err).splitlines()[0])]  # IPython's "CudaCheckError: ", coloured
    assert "\x1b[" in coloured_name and shown.startswith(coloured_name)
    assert "\x1b[" in shown.split("\n", 2)[1]  # the frames in IPython's colours too

    shell.run_line_magic("colors", "nocolor" if IPython.version_info[0] >= 9 else "NoColor")
    shell.run_line_magic("xmode", "plain")
    _, plain = _run(shell, "%%cudacheck\nout = m(ids)\n")
    lines = plain.strip().splitlines()
    assert "line 2" in lines[1] and lines[2].strip() == "out = m(ids)"
    assert "line 8" in lines[3] and lines[4].strip() == "return self.emb(tokens)"
    assert not [line for line in lines if any(word in line for word in NOT_THE_USER_S)]

    shell.run_line_magic("xmode", "minimal")
    _, minimal = _run(shell, "%%cudacheck\nout = m(ids)\n")
    lines = minimal.strip().splitlines()
    assert lines[0].startswith("CudaCheckError: aten.embedding: argument indices (ids)")
    assert lines[1].startswith("  valid:") and "Cell In[" not in minimal


def test_fast_check_error_shows_where_the_op_ran_not_the_cell_s_end(shell) -> None:
    shell.run_line_magic("cudaguard", "check on")
    try:
        err, shown = _run(shell, "x = 1\nout = m(ids)\ny = 2\n")
    finally:
        shell.run_line_magic("cudaguard", "check off")
    cell = _cell(err.user_line, "cell [", "], line 2: out = m(ids)")
    assert type(err).__name__ == "FastCheckError" and err.variable == "ids"
    lines = ANSI.sub("", shown).strip().splitlines()
    assert lines[0].startswith("FastCheckError: F.embedding: argument indices (ids) had 1 invalid value(s)")
    assert lines[0].endswith(f"12 at [2]; at cell [{cell}], line 2: out = m(ids)")
    assert "line 2" in lines[1] and lines[2].strip() == "out = m(ids)"
    assert lines[3].endswith("in M.forward") and lines[4].strip() == "return self.emb(tokens)"
    assert "y = 2" not in shown  # the cell's last line, where the error was raised, is not where the op ran
    assert not [line for line in lines if any(word in line for word in NOT_THE_USER_S)]
    assert lines[-1].startswith("  choices: ") and "names this cell assigned or changed" in shown
    assert f"  at: cell [{cell}], line 2: out = m(ids) (via M.forward, cell [" in str(err)
