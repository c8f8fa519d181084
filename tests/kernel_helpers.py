"""Helpers for tests that drive real kernels across a restart."""

from __future__ import annotations

import ast
import os
import time

from nb_cudaguard.cli.kernelsession import CellResult, KernelSession

# Every kernel gets this checkout on its path, so that it loads this nb_cudaguard, before and after the exec.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}


def value(kernel: KernelSession, expression: str):
    """The value of an expression in the kernel (its repr must be a Python literal)."""
    result = kernel.run(f"print(repr({expression}))", timeout=60)
    assert result.status == "ok", (expression, result.status, result.error, result.stderr)
    return ast.literal_eval(result.stdout.strip().splitlines()[-1])


def state(kernel: KernelSession, expression: str, timeout: float = 60):
    """The value of an expression, read from the execute reply on the shell channel, not from printed output.

    For assertions about what a restart rebuilt, made by a client that read only shell replies since the restart:
    the output of its next request reaches it only once its iopub has subscribed again, which is what other tests
    check; these check the state.

    A request that reaches the kernel while it still aborts what followed a failed request (``stop_on_error``, for
    ``stop_on_error_timeout`` after the failure; the window is racy even at ipykernel's default of 0) is answered
    ``aborted`` and never run, so it is sent again; any other reply is read as it is.
    """
    kc = kernel.kc
    for _ in range(10):
        msg_id = kc.execute("", silent=True, user_expressions={"value": expression})
        while True:
            reply = kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        if reply["content"]["status"] != "aborted":
            break
        time.sleep(0.5)
    assert reply["content"]["status"] == "ok", (expression, reply["content"])
    result = reply["content"]["user_expressions"]["value"]
    assert result["status"] == "ok", (expression, result)
    return ast.literal_eval(result["data"]["text/plain"])


def run_ok(kernel: KernelSession, code: str, timeout: float = 60) -> CellResult:
    result = kernel.run(code, timeout=timeout)
    assert result.status == "ok", (code, result.error, result.stderr)
    return result
