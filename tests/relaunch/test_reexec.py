"""The command line the in-place restart execs: the extension, and the config file that watches iopub welcomes."""

from __future__ import annotations

import sys

import pytest
from kernel_helpers import ENV, value

from nb_cudaguard.cli.kernelsession import KernelSession
from nb_cudaguard.relaunch import reexec


def test_the_exec_adds_the_extension_and_the_welcome_watch_once(monkeypatch):
    launch = [sys.executable, "-m", "ipykernel_launcher", "-f", "kernel.json"]
    monkeypatch.setattr(sys, "orig_argv", [*launch, reexec.EXT_ARG, reexec.CONFIG_ARG])  # after a first restart
    assert reexec.exec_argv() == [*launch, reexec.EXT_ARG, reexec.CONFIG_ARG]


@pytest.mark.parametrize(
    "own", [["--config=mine.py"], ["--config", "mine.py"], ["--IPKernelApp.extra_config_file=m.py"]]
)
def test_a_kernel_started_with_a_config_file_of_its_own_keeps_it(monkeypatch, own):
    launch = [sys.executable, "-m", "ipykernel_launcher", *own, "-f", "kernel.json"]
    monkeypatch.setattr(sys, "orig_argv", launch)
    assert reexec.exec_argv() == [*launch, reexec.EXT_ARG]


@pytest.mark.kernel
def test_the_config_file_sees_the_subscription_a_client_made_before_any_extension_loaded():
    """A client subscribes as the kernel starts, long before the extension loads; only a watch started by the
    config file, before ipykernel's iopub thread, sees that subscription (ipykernel 7's welcome; on 6 what the
    iopub socket, made an XPUB, hands up)."""
    with KernelSession(extra_env=ENV, extra_args=[reexec.CONFIG_ARG]) as kernel:
        seen = "__import__('nb_cudaguard.relaunch.iopub_clients').relaunch.iopub_clients._SUBSCRIPTIONS"
        assert value(kernel, f"({seen}.watched_from_start, {seen}.seen.is_set())") == (True, True)
