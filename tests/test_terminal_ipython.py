"""Terminal IPython (no ipykernel): the fd route of the capture, in a real `ipython` process."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

SESSION = (
    "%load_ext nb_cudaguard\n"
    "import torch\n"
    "%cudaguard simulate on\n"
    "emb = torch.nn.Embedding(10, 4).to('cuda')\n"
    "emb(torch.tensor([12], device='cuda'))\n"
    "%cudaguard report --json\n"
    "print('still', 'alive')\n"
)


def test_terminal_ipython_captures_and_still_shows_the_assertion():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "IPython",
            "--no-banner",
            "--colors=NoColor",
            "--quick",
            "--HistoryManager.hist_file=:memory:",
        ],
        input=SESSION,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr.count("Assertion `srcIndex < srcSelectDimSize` failed.") == 4  # not stolen, not doubled
    assert "CUDA context POISONED" in done.stdout
    assert '"condition": "srcIndex < srcSelectDimSize"' in done.stdout
    assert '"count": 4' in done.stdout
    assert "still alive" in done.stdout
