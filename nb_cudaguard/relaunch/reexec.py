"""Replace this process with a fresh image of itself: same PID, same argv, nothing of the old state.

What must happen before the ``exec`` so that the new image starts clean and the GPU is really released:

* child processes end first: a DataLoader worker forked after CUDA started holds the driver's files, and the
  driver frees a context's memory only when the last of them is closed;
* every inherited file descriptor above 2 is marked close-on-exec: Python's own are already, but the CUDA driver
  opens ``/dev/nvidiactl`` without ``O_CLOEXEC``, and a descriptor that survives keeps the context alive;
* fds 1 and 2 are given back their original files: under ipykernel they are the write ends of pipes whose reader
  thread dies with the exec, and the new image would block once such a pipe filled up.
"""

from __future__ import annotations

import os
import signal
import sys
import time

EXT_ARG = "--ext=nb_cudaguard"
CONFIG_ARG = "--config=" + os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_config.py")
# Where a kernel was started with a config file of its own, ours is not added: IPython takes one ``--config``.
_CONFIG_OPTIONS = ("--config", "--BaseIPythonApplication.extra_config_file", "--IPKernelApp.extra_config_file")
_GRACE_SECONDS = 2.0


def _holds_gpu(pid: int) -> bool:
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any(link.startswith("/dev/nvidia") for link in links)


def end_children(grace: float = _GRACE_SECONDS) -> list[str]:
    """End this process's children in its process group (as ipykernel's shutdown does) and any other descendant
    that holds a GPU device file: SIGTERM, then SIGKILL after ``grace`` seconds. Returns what was ended."""
    try:
        import psutil
    except ImportError:  # ipykernel depends on psutil; without it we cannot find the children reliably
        return []
    group = os.getpgrp()
    targets = []
    for child in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(child.pid) == group or _holds_gpu(child.pid):
                targets.append(child)
        except (OSError, psutil.Error):
            continue
    described = []
    for child in targets:
        try:
            described.append(f"{child.pid} ({' '.join(child.cmdline()[:3]) or child.name()})")
            child.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(targets, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return described


def mark_fds_cloexec() -> int:
    """Every descriptor above 2 becomes close-on-exec. Returns how many were inheritable before."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        import resource

        fds = list(range(3, min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)))
    changed = 0
    for fd in fds:
        if fd <= 2:
            continue
        try:
            if os.get_inheritable(fd):
                os.set_inheritable(fd, False)
                changed += 1
        except OSError:  # closed meanwhile (the listing's own fd)
            continue
    return changed


def exec_argv() -> list[str]:
    """The command line this interpreter was started with, plus the option that loads nb_cudaguard and the config
    file that watches iopub subscriptions from the new process's start (``relaunch/kernel_config.py``)."""
    original = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    kept = [arg for arg in original[1:] if arg not in (EXT_ARG, CONFIG_ARG)]
    own_config = any(arg.split("=", 1)[0] in _CONFIG_OPTIONS for arg in kept)
    return [sys.executable, *kept, EXT_ARG, *(() if own_config else (CONFIG_ARG,))]


def exec_self(argv: list[str]) -> None:
    """Replace the process image; returns only by raising ``OSError``."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is None:  # no console (pythonw, a daemon)
            continue
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os.environ["NB_CUDAGUARD_EXEC_AT"] = repr(time.time())
    os.execv(argv[0], argv)
