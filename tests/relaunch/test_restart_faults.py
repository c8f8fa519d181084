"""The restart under faults a user can cause: a changed temporary directory, a kernel killed in the exec window."""

from __future__ import annotations

import glob
import os
import tempfile
import time
from pathlib import Path

import IPython
import pytest
from kernel_helpers import ENV, run_ok, state, value

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = pytest.mark.kernel

LEFTOVERS = """
import nb_cudaguard.replay.handoff as h, nb_cudaguard.carry.place as p
b = h.binding_for(get_ipython())
try:
    found = [str(f) for f in h.handoff_dir(b, create=False).glob(f'*handoff-{b.slug}*')]  # hidden files too
except FileNotFoundError:  # no restart ever wrote there
    found = []
found += [str(d) for root in p.roots() for d in root.glob(f'carry-{b.slug}')]
"""


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    # The kernel's connection file, hence its handoff directory, in a directory of this test's own: a
    # kernel of another suite running beside this one (same user, same machine) removes a killed kernel's handoff
    # from a shared directory as left behind, rightly, and then the restarted kernel has nothing to refuse or say.
    # (jupyter_client writes a connection file with no name given into the temporary directory)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runtime))
    with KernelSession(extra_env=ENV) as session:
        run_ok(session, "%load_ext nb_cudaguard")
        yield session


def test_a_changed_temporary_directory_does_not_lose_the_replay(kernel, tmp_path):
    run_ok(kernel, "x = 41")
    run_ok(kernel, f"%env TMPDIR={tmp_path}")
    run_ok(kernel, "import tempfile\ntempfile.tempdir = None  # as if nothing had asked for it before")
    run_ok(kernel, "%cudaguard restart --replay all --no-carry")
    assert value(kernel, "x + 1") == 42  # the new process found the handoff and replayed
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "found") == []


# Where the kernel dies, as a cell that arranges it: the old process's own steps are patched; the new image is
# reached through a sitecustomize that only it imports (on the PYTHONPATH the old process hands to the exec; the
# kernel manager's restart uses its own environment).
KILL = "os.kill(os.getpid(), signal.SIGKILL)"
DIE_AT = {
    "end_children": f"import nb_cudaguard.relaunch.reexec as r\nr.end_children = lambda *_: {KILL}",
    "exec_self": f"import nb_cudaguard.relaunch.reexec as r\nr.exec_self = lambda *_: {KILL}",
    "new_image": KILL,
    "handoff_taken": f"import nb_cudaguard.replay.handoff as h\ntake = h.consume\nh.consume = lambda *a: (take(*a), {KILL})[0]",
}


def _die_at(where: str, site: Path) -> str:
    if where in ("end_children", "exec_self"):
        return f"import os, signal\n{DIE_AT[where]}"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import os, signal\n{DIE_AT[where]}\n")
    return f"import os\nos.environ['PYTHONPATH'] = {str(site)!r} + os.pathsep + os.environ['PYTHONPATH']"


# The killed kernel's handoff was sometimes removed as left behind before the next start could refuse it, and then
# nothing was said at the next cell: seen on the oldest pair (IPython 7.34, ipykernel 6.17) and once on the newest,
# each time while other test suites ran on the same machine, whose kernels remove a dead kernel's files from the
# shared runtime directory (rightly: no process can take them). The fixture now gives each test its own runtime
# directory; the mark stays non-strict on the oldest pair until CI has run it clean there.
_OLDEST_SAYS_NOTHING = pytest.mark.xfail(
    IPython.version_info < (8,), strict=False, reason="the oldest pair may remove the dead kernel's handoff unsaid"
)


@pytest.mark.parametrize(
    ("where", "said_after"),
    [
        ("end_children", ""),  # between the space reserved for the handoff and its write: nothing to refuse
        pytest.param("exec_self", "refused the restart handoff", marks=_OLDEST_SAYS_NOTHING),  # the exec window
        pytest.param("new_image", "refused the restart handoff", marks=_OLDEST_SAYS_NOTHING),  # right after the exec
        ("handoff_taken", ""),  # during the load: the handoff consumed, the carried values not yet read
    ],
)
def test_a_kernel_killed_at_any_step_of_the_restart_leaves_nothing_for_the_next_session(
    kernel, tmp_path, where, said_after
):
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")  # slow to rebuild: carried
    assert kernel.run("values[0] + missing_name").status == "error"
    run_ok(kernel, _die_at(where, tmp_path / "site"))
    first_pid = kernel.pid
    kernel.kc.execute("%cudaguard restart")  # dies at `where`
    _restart_by_manager(kernel, first_pid)
    run_ok(kernel, "%load_ext nb_cudaguard")
    said = run_ok(kernel, "print('values' in dir())")
    assert said.stdout.strip().splitlines()[-1] == "False"  # the dead session's cells were not replayed here
    assert said_after in said.stdout and ("nb_cudaguard" in said.stdout) == bool(said_after), said.stdout
    if said_after:
        assert "which was ended before it could restart" in said.stdout
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "found") == []  # neither the handoff nor the carried values stay behind
    os.kill(kernel.pid, 0)  # and the new session goes on


def test_a_carry_directory_that_is_not_private_calls_the_restart_off_in_one_message_and_leaves_nothing(kernel):
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")
    assert kernel.run("values[0] + missing_name").status == "error"
    root = value(kernel, "str(__import__('nb_cudaguard.replay.handoff').replay.handoff.private_dir())")
    os.chmod(root, 0o755)  # someone made it public: nothing may be written or read there
    try:
        result = kernel.run("%cudaguard restart")
    finally:
        os.chmod(root, 0o700)
    assert result.status == "error" and result.error["ename"] == "RestartError"
    traceback = result.outputs[-1]["traceback"]
    assert len(traceback) == 1 and "the restart was not started" in traceback[0]
    assert "--no-carry" in traceback[0] and "not a private directory" in traceback[0]
    assert value(kernel, "int(values.sum())") == 4999950000  # the session goes on, nothing lost
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "found") == []


def test_a_symlink_left_at_the_carry_path_does_not_stop_later_restarts(kernel, tmp_path):
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")
    assert kernel.run("values[0] + missing_name").status == "error"
    planted = value(
        kernel,
        "str(__import__('nb_cudaguard.carry.place').carry.place.choose_root(10**6)"
        " / f\"carry-{__import__('nb_cudaguard.replay.handoff').replay.handoff.binding_for(get_ipython()).slug}\")",
    )
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("not ours")
    os.symlink(target, planted)
    run_ok(kernel, "%cudaguard restart")
    assert value(kernel, "int(values.sum())") == 4999950000  # restarted, and the values came back
    assert (target / "keep").read_text() == "not ours"  # the link was removed, never followed
    assert not os.path.lexists(planted)


# What a kernel's restart may leave, by its slug: its handoff (and side file, hidden files too) beside its
# connection file, its carried values and snapshot under every carry root (/dev/shm where the budget fits in memory).
LEFT_BY = """
import glob, nb_cudaguard.replay.handoff as h, nb_cudaguard.carry.place as p
b = h.binding_for(get_ipython())
where = [str(h.handoff_dir(b) / f'*handoff-{b.slug}*')] + [str(r / f'*-{b.slug}') for r in p.roots()]
"""


def _left(patterns: list[str]) -> list[str]:
    return sorted(path for pattern in patterns for path in glob.glob(pattern))


def test_a_kernel_killed_in_the_exec_window_leaves_nothing_once_another_kernel_starts(kernel):
    """The handoff and the carried values are marked with their writer (PID, boot, meant for the same process):
    once that process has ended, no process can take them, and the next start of the extension in any kernel of
    the user removes them at once (before, a kernel that no one restarted left its values in /dev/shm until the
    machine rebooted: a new kernel kept them for five minutes and then, its PID gone, still looked only at the
    directory's age)."""
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.ones(2_000_000)")  # 16 MB, slow to rebuild: carried
    assert kernel.run("values[0] + missing_name").status == "error"
    run_ok(kernel, LEFT_BY)
    patterns = value(kernel, "where")
    run_ok(kernel, _die_at("exec_self", Path()))
    kernel.kc.execute("%cudaguard restart")
    deadline = time.monotonic() + 60
    while kernel.km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel.km.is_alive(), "the kernel was to die in the exec window"
    left = _left(patterns)
    assert any("handoff-" in path for path in left) and any("carry-" in path for path in left), left
    with KernelSession(extra_env=ENV) as other:  # another kernel of the same user, later
        said = run_ok(other, "%load_ext nb_cudaguard")
        assert _left(patterns) == [], said.stdout
        assert value(other, "1 + 1") == 2


def test_the_exit_path_finds_its_carried_values_though_another_kernel_started_meanwhile(tmp_path):
    """After the exit fallback the writer has ended on purpose: what it wrote is for the kernel's next process, and
    a start of the extension elsewhere in between keeps it."""
    env = {**ENV, "IPYTHONDIR": str(tmp_path)}  # the startup file goes into this profile only
    with KernelSession(extra_env=env) as kernel:
        run_ok(kernel, "%load_ext nb_cudaguard")
        run_ok(kernel, "import time\nimport numpy as np")
        run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")  # carried
        assert kernel.run("values[0] + missing_name").status == "error"
        run_ok(kernel, LEFT_BY)
        patterns = value(kernel, "where")
        first_pid = kernel.pid
        kernel.kc.execute("import nb_cudaguard\nnb_cudaguard.restart(method='exit')")
        deadline = time.monotonic() + 60
        while kernel.km.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any("carry-" in path for path in _left(patterns)), _left(patterns)
        with KernelSession(extra_env=ENV) as other:
            run_ok(other, "%load_ext nb_cudaguard")
        assert any("carry-" in path for path in _left(patterns)), "another kernel removed a restart in flight"
        _restart_by_manager(kernel, first_pid)  # the startup file loads nb_cudaguard, which replays
        said = run_ok(kernel, "print(int(values.sum()))")
        assert said.stdout.strip().splitlines()[-1] == "4999950000", said.stdout
        assert "restarted by Jupyter, after the kernel exited" in said.stdout and "carried 1 value(s)" in said.stdout, (
            said.stdout
        )
        assert _left(patterns) == []


def _restart_by_manager(kernel, first_pid: int) -> None:
    deadline = time.monotonic() + 60
    while kernel.km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel.km.is_alive(), "the kernel was to die"
    kernel.km.restart_kernel(now=True)  # the kernel manager brings it back: same connection file, a new process
    kernel.kc.wait_for_ready(timeout=60)
    assert kernel.pid != first_pid


def test_a_kernel_killed_during_the_replay_leaves_nothing_for_the_next_session(kernel, tmp_path):
    flag = tmp_path / "kill-during-replay"
    run_ok(kernel, "import time\nimport numpy as np")
    run_ok(kernel, "time.sleep(1.0)\nvalues = np.arange(100_000)")  # carried
    run_ok(
        kernel,
        f"import os, pathlib, signal\nif pathlib.Path({str(flag)!r}).exists():\n    os.kill(os.getpid(), signal.SIGKILL)",
    )
    assert kernel.run("values[0] + missing_name + os.getpid()").status == "error"
    flag.write_text("")
    first_pid = kernel.pid
    kernel.kc.execute("%cudaguard restart --replay all")  # the replayed cell kills the new process
    _restart_by_manager(kernel, first_pid)
    run_ok(kernel, "%load_ext nb_cudaguard")
    assert value(kernel, "'values' in dir()") is False  # a fresh session: nothing replayed into it
    run_ok(kernel, LEFTOVERS)
    assert value(kernel, "found") == []


# What makes the new process refuse the handoff, done to the file right after the old process wrote it.
REFUSE = """
import os, pathlib, shutil, nb_cudaguard.replay.handoff as handoff
real_write = handoff.write
def write_then_spoil(binding, payload, *reserved):
    path = real_write(binding, payload, *reserved)
    {spoil}
    return path
handoff.write = write_then_spoil
"""
SPOIL = {
    "group-readable": "os.chmod(path, 0o640)",
    "symlink": "real = pathlib.Path({elsewhere!r}); shutil.move(path, real); os.symlink(real, path)",
    "changed": "path.write_text(path.read_text().replace('marker', 'MARKER'))",
    "cut short": "path.write_bytes(path.read_bytes()[:100])",  # no handoff's JSON: its side file says what it kept
    "overwritten": "path.write_text('{{}}')",
}


@pytest.mark.parametrize("spoil", sorted(SPOIL))
def test_a_refused_handoff_still_answers_every_request_kept_in_it(kernel, spoil, tmp_path):
    """Refused, its kept requests are still answered, each once: signed by their own clients, they are checked one
    by one and answered with an error, never run."""
    run_ok(kernel, "marker = 1")
    run_ok(kernel, REFUSE.format(spoil=SPOIL[spoil].format(elsewhere=str(tmp_path / "handoff.json"))))
    kc = kernel.kc
    restart_id = kc.execute("%cudaguard restart --replay all")
    kept_ids = [kc.execute(f"print({n})") for n in range(3)]  # sent during the restart
    replies: dict[str, str] = {}
    deadline = time.monotonic() + 120
    while len(replies) < 4 and time.monotonic() < deadline:
        msg = kc.get_shell_msg(timeout=120)
        replies[msg["parent_header"]["msg_id"]] = msg["content"]
    assert replies[restart_id]["status"] == "ok"
    statuses = [replies[msg_id]["status"] for msg_id in kept_ids]  # each got exactly one reply
    refused = [replies[msg_id] for msg_id in kept_ids if replies[msg_id]["status"] == "error"]
    assert all("was sent while the kernel restarted" in content["evalue"] for content in refused)
    # the first refused request fails as a cell would, and the kernel aborts the ones queued behind it
    assert set(statuses) <= {"ok", "error", "aborted"} and (not refused or statuses[0] in ("ok", "error")), statuses
    # from the execute reply: this client read only shell replies during the restart, and on ipykernel 6 nothing says
    # when its iopub has subscribed again (docs/restart.md, the limits): a printed value could be lost
    assert state(kernel, "'marker' in globals()") is False  # nothing in the refused handoff was run
