"""A real ipykernel kernel driven through jupyter_client, for the demo, the CLI and the tests.

Kept small: start a kernel, run code, collect what a frontend would show, shut down.
"""

from __future__ import annotations

import os
import queue
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from jupyter_client.blocking.client import BlockingKernelClient
    from jupyter_client.manager import KernelManager

# Set to a file's path, the kernel's own stdout and stderr (its log: ipykernel's and nb_cudaguard's warnings, and the
# C-level output it mirrors) are appended there instead of going nowhere: for a failure that a soak run shows once.
KERNEL_LOG_ENV = "NB_CUDAGUARD_KERNEL_LOG"


@dataclass
class CellResult:
    code: str
    status: str = "ok"
    outputs: list[dict] = field(default_factory=list)  # nbformat-style output dicts
    error: dict | None = None
    execution_count: int | None = None

    @property
    def stdout(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("name") == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("name") == "stderr")

    def texts(self, mime: str = "text/plain") -> list[str]:
        return [o["data"][mime] for o in self.outputs if mime in o.get("data", {})]


class KernelSession:
    """``with KernelSession() as k: k.run("1 + 1")``. The kernel gets a clean environment for fd capture."""

    def __init__(
        self,
        kernel_name: str = "python3",
        extra_env: dict | None = None,
        cwd: str | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.extra_env = extra_env or {}
        self.extra_args = extra_args or []
        self.cwd = cwd
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None
        self._log: BinaryIO | None = None  # KERNEL_LOG_ENV's file, open while the kernel may be started

    def __enter__(self) -> KernelSession:
        from jupyter_client.manager import KernelManager

        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # ipykernel skips fd capture
        env.update(self.extra_env)
        self.km = KernelManager(kernel_name=self.kernel_name)
        # The kernel's own fds 1/2 (where ipykernel mirrors C-level output) go nowhere, or to KERNEL_LOG_ENV's file
        # (a client sees the copies); the file stays open with the manager, which reuses it when it restarts the kernel.
        log = os.environ.get(KERNEL_LOG_ENV)
        self._log = open(log, "ab") if log else None
        sink = self._log if self._log is not None else subprocess.DEVNULL
        self.km.start_kernel(env=env, cwd=self.cwd, extra_arguments=self.extra_args, stdout=sink, stderr=sink)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km is not None:
            self.km.shutdown_kernel(now=True)
            self.km = None
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        process = getattr(provisioner, "process", None)
        return getattr(process, "pid", None)

    def run(self, code: str, timeout: float = 120) -> CellResult:
        if self.kc is None:
            raise RuntimeError("the kernel is not started: use the session as a context manager")
        result = CellResult(code)

        def on_output(msg) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs = result.outputs
                if outputs and outputs[-1].get("name") == content["name"]:
                    outputs[-1]["text"] += content["text"]
                else:
                    outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                outputs_entry = {"output_type": kind, "data": content["data"]}
                result.outputs.append(outputs_entry)
            elif kind == "error":
                result.error = {"ename": content["ename"], "evalue": content["evalue"]}
                result.outputs.append({"output_type": "error", **result.error, "traceback": content["traceback"]})

        try:
            # stop_on_error=False: this client sends one cell at a time, so a failed cell has nothing queued behind
            # it to abort; with it on, ipykernel 6 aborts whatever arrives before its event loop ends the abort,
            # and a next cell sent the moment the failed one said idle was aborted unrun (1 run in 10 under load)
            reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=on_output, stop_on_error=False)
        except (TimeoutError, queue.Empty):
            result.status = "timeout"
            return result
        result.status = reply["content"]["status"]
        result.execution_count = reply["content"].get("execution_count")
        return result
