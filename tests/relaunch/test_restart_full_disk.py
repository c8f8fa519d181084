"""The restart on a disk that fills up, for real: the kernel's handoff directory is a small tmpfs of its own.

The kernel runs in a mount namespace of its own (``unshare``), where a tmpfs is mounted over the directory its
handoff goes to (beside its connection file); nothing else on the machine sees that tmpfs, and filling it gives the
kernel a real ``ENOSPC``, as a full disk does. The kernel's connection file is under this test's own runtime
directory, so nothing is mounted over a directory that another kernel uses.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import sys
import time

import pytest
from kernel_helpers import ENV, run_ok, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = pytest.mark.kernel

KERNEL = "nb-cudaguard-small-disk"
# $0: the interpreter, $1: the connection file; the tmpfs goes where the kernel's handoff directory is
MOUNT_THEN_START = (
    'dir="$(dirname "$1")/nb_cudaguard-$(id -u)" && mkdir -p -m 700 "$dir" && '
    'mount -t tmpfs -o size=4m,mode=700 nb_cudaguard-test "$dir" && exec "$0" -m ipykernel_launcher -f "$1"'
)
HANDOFF_DIR = "str(h.handoff_dir(h.binding_for(get_ipython())))"
FILL = """
import os
def fill(directory, leave=0):
    '''Fill the filesystem of directory until only about `leave` bytes are free; return what is free then.'''
    fd = os.open(os.path.join(directory, 'filler'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            while os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize - chunk >= leave:
                try:
                    os.write(fd, b'\\0' * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
"""
# The disk fills between the handoff's two writes (now: its space reserved, then its write), while the restart ends
# the kernel's children: after the point of no return, where a failed write could no longer be called off.
FILL_BETWEEN_THE_WRITES = """
import nb_cudaguard.relaunch.reexec as reexec
_end_children = reexec.end_children
def fill_then_end_children(*args, **kwargs):
    os.environ['FREE_AFTER_FILL'] = str(fill(HANDOFF))  # the environment survives the exec
    return _end_children(*args, **kwargs)
reexec.end_children = fill_then_end_children
"""
SETUP = f"import nb_cudaguard.replay.handoff as h\nHANDOFF = {HANDOFF_DIR}\n{FILL}"  # again after a restart
LEFTOVERS = """
import glob, nb_cudaguard.carry.place as p
left = sorted(set(os.listdir(HANDOFF)) - {'filler'}) + [
    d for root in p.roots() for d in glob.glob(str(root / f'carry-{h.binding_for(get_ipython()).slug}'))
]
"""


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernel whose handoff directory is a 4 MB tmpfs that only it sees."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], check=False).returncode:
        pytest.skip("needs mount namespaces (unshare -rm) to give the kernel a small disk of its own")
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = ["unshare", "-rm", "sh", "-c", MOUNT_THEN_START, sys.executable, "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    with KernelSession(kernel_name=KERNEL, extra_env=ENV) as session:
        run_ok(session, "%load_ext nb_cudaguard")
        run_ok(session, SETUP)
        assert value(session, "os.statvfs(HANDOFF).f_blocks * os.statvfs(HANDOFF).f_frsize") == 4 * 2**20
        yield session


def _carried_value_then_a_failure(kernel) -> None:
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")  # slow to rebuild: carried
    assert kernel.run("values[0] + missing_name").status == "error"


def _replies(kernel, msg_ids: list[str], timeout: float = 60) -> dict[str, dict]:
    """The reply to each of ``msg_ids``, the text it printed and the text its display shows last, by request; fails
    at once where the kernel exits. Iopub is read first, as a frontend does: a client subscribes again after the exec
    only once it reads iopub."""
    kc = kernel.kc
    printed = dict.fromkeys(msg_ids, "")
    shown = dict.fromkeys(msg_ids, "")
    idle: set[str] = set()
    deadline = time.monotonic() + timeout
    while idle != set(msg_ids) and time.monotonic() < deadline:
        assert kernel.km.is_alive(), "the kernel exited"
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        parent = msg["parent_header"].get("msg_id")
        if msg["msg_type"] == "stream" and parent in printed:
            printed[parent] += msg["content"]["text"]
        elif msg["msg_type"] in ("display_data", "update_display_data") and parent in shown:
            shown[parent] = msg["content"]["data"]["text/plain"]
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" and parent in printed:
            idle.add(parent)
    replies: dict[str, dict] = {}
    while len(replies) < len(msg_ids) and time.monotonic() < deadline:
        msg = kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.1))
        replies[msg["parent_header"]["msg_id"]] = msg["content"]
    assert set(replies) == set(msg_ids) == idle, f"no reply or no idle for {set(msg_ids) - (set(replies) & idle)}"
    return {msg_id: {**replies[msg_id], "printed": printed[msg_id], "shown": shown[msg_id]} for msg_id in msg_ids}


def test_a_disk_that_fills_between_the_two_handoff_writes_does_not_end_the_kernel(kernel):
    _carried_value_then_a_failure(kernel)
    run_ok(kernel, FILL_BETWEEN_THE_WRITES)
    restart_id = kernel.kc.execute("%cudaguard restart")
    sent_id = kernel.kc.execute("print(int(values.sum()))")  # sent during the restart
    replies = _replies(kernel, [restart_id, sent_id])
    assert replies[restart_id]["status"] == "ok" and replies[sent_id]["status"] == "ok", replies
    printed = replies[sent_id]["printed"]
    assert "carried 1 value(s)" in printed and printed.strip().splitlines()[-1] == "4999950000", printed
    run_ok(kernel, SETUP)
    assert value(kernel, "os.environ['FREE_AFTER_FILL']") == "0"  # the disk was full for the second write
    assert value(kernel, "__import__('nb_cudaguard').get_guard().restarts") == 1
    assert value(kernel, "os.getpid()") == kernel.pid  # the same process, exec'd: no exit, no manager's restart
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "left") == []


def test_a_disk_without_room_for_the_handoff_calls_the_restart_off_before_anything_is_closed(kernel):
    _carried_value_then_a_failure(kernel)
    run_ok(kernel, "stamp = time.monotonic_ns()  # not needed by the failing cell: gone after a restart")
    stamp = value(kernel, "stamp")
    assert 0 < value(kernel, "fill(HANDOFF, leave=256 * 1024)") < 1024 * 1024  # room for a handoff, not much more
    restart_id = kernel.kc.execute("%cudaguard restart")
    sent_id = kernel.kc.execute("print(int(values.sum()), stamp)")  # sent during the restart: runs here
    replies = _replies(kernel, [restart_id, sent_id])
    assert replies[restart_id]["status"] == "ok" and replies[sent_id]["status"] == "ok", replies
    printed = replies[sent_id]["printed"].strip().splitlines()
    assert printed[-1] == f"4999950000 {stamp}"  # this process, as it was
    said = [line for line in printed if "nb_cudaguard" in line]  # at the next cell, and in the restart cell's line
    assert len(said) == 1 and said[0] == replies[restart_id]["shown"], (said, replies[restart_id]["shown"])
    assert "the restart did not start" in said[0] and "this kernel goes on as it was" in said[0]
    assert "No space left on device" in said[0] and value(kernel, "HANDOFF") in said[0], said
    assert value(kernel, "(os.getpid(), __import__('nb_cudaguard').get_guard().restarts)") == (kernel.pid, 0)
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "left") == []  # no handoff, no reserved space, no carried values
