"""Restart one real kernel many times while a client sends requests into each restart, and count what arrives.

    python benchmarks/soak_requests.py --restarts 20                    # this interpreter's ipykernel
    .nox/tests_ipykernel6/bin/python benchmarks/soak_requests.py        # ipykernel 6, from the nox session's venv

Each round sends ``%cudaguard restart --replay all`` and, right behind it, ``--requests`` cells that each print a
marker, so that they reach the kernel while it execs and replays. Three kinds of client take turns:

- ``reads``: reads iopub all along (as JupyterLab's server does);
- ``late``: reads nothing for half a second, then its iopub (a script that sends and looks later);
- ``replies_first``: reads every shell reply before any iopub (a client that collects statuses first), then sends
  ``--requests`` more cells and reads their output. Its iopub subscribes again only when it next reads iopub, so
  the output of those later cells is lost unless the kernel waits for that subscription; counted are the later
  cells (the output of the cells kept during the restart cannot reach a client that does not subscribe at all).

Counted per kind: restarts, requests sent, replies, requests whose printed marker never arrived (lost output),
and, once the kernel has shut down, what stayed in nb_cudaguard's private directories (handoffs, carried values).
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from kernel_helpers import ENV, run_ok
from soak_restart import leftovers

from nb_cudaguard.cli.kernelsession import KernelSession

KINDS = ("reads", "late", "replies_first")


def one_round(kc, round_: int, requests: int, kind: str, timeout: float = 120) -> tuple[int, int]:
    """Send a restart and ``requests`` cells behind it; return (replies, lost outputs) for those cells."""
    restart = kc.execute("%cudaguard restart --replay all")
    markers = {kc.execute(f"print('marker-{round_}-{n}')"): f"marker-{round_}-{n}" for n in range(requests)}
    if kind == "late":
        time.sleep(0.5)
    waiting = {restart, *markers}
    replies: set[str] = set()
    if kind == "replies_first":
        _replies(kc, waiting, timeout)
        markers = {kc.execute(f"print('after-{round_}-{n}')"): f"after-{round_}-{n}" for n in range(requests)}
        waiting = set(markers)
    idle: set[str] = set()
    printed = dict.fromkeys(markers, "")
    deadline = time.monotonic() + timeout
    while (replies != waiting or idle != waiting) and time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
            parent = msg["parent_header"].get("msg_id")
            if msg["msg_type"] == "stream" and parent in printed:
                printed[parent] += msg["content"]["text"]
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" and parent in waiting:
                idle.add(parent)
        except queue.Empty:
            pass
        try:
            while True:
                replies.add(kc.get_shell_msg(timeout=0)["parent_header"].get("msg_id"))
        except queue.Empty:
            pass
    lost = sum(marker not in printed[msg_id] for msg_id, marker in markers.items())
    return len(replies & set(markers)), lost


def _replies(kc, ids: set[str], timeout: float) -> None:
    """Read shell replies, and nothing else, until every request in ``ids`` has one."""
    replies: set[str] = set()
    deadline = time.monotonic() + timeout
    while not ids <= replies and time.monotonic() < deadline:
        try:
            replies.add(kc.get_shell_msg(timeout=1)["parent_header"].get("msg_id"))
        except queue.Empty:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=20, help="restarts per kind of client")
    parser.add_argument("--requests", type=int, default=3, help="requests sent into each restart")
    args = parser.parse_args()
    import ipykernel

    before = set(leftovers())
    counts: dict[str, Counter] = {kind: Counter() for kind in KINDS}
    with KernelSession(extra_env=ENV) as kernel:
        run_ok(kernel, "%load_ext nb_cudaguard")
        for round_ in range(args.restarts * len(KINDS)):
            kind = KINDS[round_ % len(KINDS)]
            replies, lost = one_round(kernel.kc, round_, args.requests, kind)
            counts[kind].update(restarts=1, sent=args.requests, replies=replies, lost=lost)
    left = sorted(set(leftovers()) - before)
    print(f"ipykernel {ipykernel.__version__}, {args.requests} requests sent into each restart")
    print("| client | restarts | requests sent | replies | lost output |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        c = counts[kind]
        print(f"| {kind} | {c['restarts']} | {c['sent']} | {c['replies']} | {c['lost']} |")
    print(f"left behind in nb_cudaguard's private directories: {len(left)}" + "".join(f"\n  {p}" for p in left))


if __name__ == "__main__":
    main()
