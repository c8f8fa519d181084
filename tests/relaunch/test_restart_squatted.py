"""A directory at nb_cudaguard's name in ``/dev/shm`` that another user made first (``/dev/shm`` is open to all).

The kernel runs in a user and mount namespace of its own (``unshare -rm``) with a directory of this test bind-mounted
over ``/dev/shm``, so nothing else on the machine sees what is squatted. In there, the squatter's directory is owned
by a user the namespace does not map: the kernel cannot enter it, as a user cannot enter another user's private
directory (the test runs as root, which could).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from kernel_helpers import ENV, run_ok, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = pytest.mark.kernel

KERNEL = "nb-cudaguard-squatted-shm"
SQUATTER = 65534  # nobody
# $0: the interpreter, $1: the connection file, $2: what is mounted over /dev/shm
MOUNT_THEN_START = 'mount --bind "$2" /dev/shm && exec "$0" -m ipykernel_launcher -f "$1"'


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    if os.getuid() != 0:
        pytest.skip("only root can make a directory that another user owns")
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], check=False).returncode:
        pytest.skip("needs user and mount namespaces (unshare -rm)")
    shm = os.path.join("/dev/shm", f"nb_cudaguard-test-{os.getpid()}-{tmp_path.name}")  # a tmpfs, as /dev/shm
    os.mkdir(shm, 0o755)
    squatted = os.path.join(shm, "nb_cudaguard-0")  # uid 0 in the namespace
    os.mkdir(squatted, 0o700)
    os.chown(squatted, SQUATTER, SQUATTER)
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = ["unshare", "-rm", "sh", "-c", MOUNT_THEN_START, sys.executable, "{connection_file}", shm]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    try:
        with KernelSession(kernel_name=KERNEL, extra_env=ENV) as session:
            yield session
    finally:
        shutil.rmtree(shm)


def test_a_squatted_shm_directory_is_neither_used_nor_entered(kernel):
    """Only private directories of this user are carry roots. Before, every look into it failed with
    ``PermissionError``, and the cleaning at each load looks: ``%load_ext nb_cudaguard`` itself failed."""
    loaded = kernel.run("%load_ext nb_cudaguard")
    assert loaded.status == "ok", loaded.error
    assert value(kernel, "__import__('os').stat('/dev/shm/nb_cudaguard-0').st_uid") != 0  # squatted, seen from inside
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")  # slow to rebuild: carried
    assert kernel.run("values[0] + missing_name").status == "error"
    restarted = run_ok(kernel, "%cudaguard restart")
    assert "Carried values are written to" in restarted.stdout and "/dev/shm" not in restarted.stdout
    said = run_ok(kernel, "print(int(values.sum()))")
    assert said.stdout.strip().splitlines()[-1] == "4999950000" and "carried 1 value(s)" in said.stdout, said.stdout
