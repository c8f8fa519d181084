"""``benchmarks/gpu_check.sh``, the one script a session lent a GPU runs: on a machine without one, its dry run
parses it, launches each part on the CPU and renders the page it would write (not written)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_gpu_check_dry_run_launches_every_part():
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "gpu_check.sh --dry-run: ok" in done.stdout
