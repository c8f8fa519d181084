"""Restart benchmarks, each against a baseline taken in the same run.

1. Restart to ready, no replay: ``%cudaguard restart --replay none`` (in-place exec) against jupyter_client's own
   ``KernelManager.restart_kernel()`` (what a frontend's Restart button does), from the request to the first
   answered ``kernel_info_request``. Target: ratio <= 1.0.
2. Replay: a notebook with fast setup cells, one slow unrelated cell (``time.sleep(5)``) and a cell that poisons
   the (simulated) GPU. The minimal plan's replay time against all cells', and the replay's overhead over the
   replayed cells' own recorded time. Target: overhead <= 0.5 s.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_restart.py [--rounds 5] [--slow 5]``
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nb_cudaguard.cli.kernelsession import KernelSession

ENV = {"PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}


def _ok(kernel: KernelSession, code: str) -> str:
    result = kernel.run(code, timeout=300)
    if result.status != "ok":
        raise RuntimeError(f"{code!r} failed: {result.error} {result.stderr}")
    return result.stdout


def _ready(kc, timeout: float = 60) -> None:
    """Until a kernel_info_request sent now is answered on shell and its ``idle`` arrives on iopub: what a frontend
    needs to run a cell. (jupyter_client's own wait_for_ready accepts any queued kernel_info_reply, even a stale one
    from before the restart, which would make a round look fast; and a reply alone does not show that iopub is
    back, which after jupyter_client 7's restart_kernel it often is not yet.) A request is sent every 0.2 s, and
    any of them counts."""
    sent: set[str] = set()
    replied: set[str] = set()
    idle: set[str] = set()
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        sent.add(kc.kernel_info())
        resend = time.perf_counter() + 0.2
        while time.perf_counter() < resend:
            for msg in _pending(kc.get_shell_msg):
                replied.add(msg["parent_header"].get("msg_id"))
            for msg in _pending(kc.get_iopub_msg):
                if msg["content"].get("execution_state") == "idle":
                    idle.add(msg["parent_header"].get("msg_id"))
            if sent & replied & idle:
                return
    raise TimeoutError("the kernel did not answer")


def _pending(get) -> list[dict]:
    try:
        return [get(timeout=0.005)]
    except queue.Empty:
        return []


def restart_to_ready(rounds: int) -> dict:
    """Rounds alternate between the three ways, so that a busy machine slows them alike."""
    times: dict[str, list[float]] = {"in_place": [], "restart_kernel": [], "restart_kernel_now": []}
    with KernelSession(extra_env=ENV) as kernel:
        for _ in range(rounds):
            _ok(kernel, "%load_ext nb_cudaguard")  # the baseline restarts come back without it
            pid = kernel.pid
            started = time.perf_counter()
            _ok(kernel, "%cudaguard restart --replay none")
            _ready(kernel.kc)
            times["in_place"].append(time.perf_counter() - started)
            assert kernel.pid == pid, "the in-place restart must keep the PID"
            for key, now in (("restart_kernel", False), ("restart_kernel_now", True)):
                started = time.perf_counter()
                kernel.km.restart_kernel(now=now)
                _ready(kernel.kc)
                times[key].append(time.perf_counter() - started)
    result = {key: statistics.median(values) for key, values in times.items()}
    result["ratio"] = result["in_place"] / result["restart_kernel"]
    return result


def _notebook(slow: float) -> list[str]:
    return [
        "%load_ext nb_cudaguard",
        "import torch\nimport torch.nn.functional as F",
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "inputs = torch.randn(64, 16)\nlabels = torch.randint(0, 5, (64,))",
        "def batch_loss(x, y):\n    return F.cross_entropy(model(x), y)",
        f"import time\ntime.sleep({slow})\nreport_rows = list(range(1000))",
        "labels[3] = 9  # a label out of range",
        "%cudaguard simulate on",
    ]


def replay(slow: float, rounds: int) -> dict:
    """Median over ``rounds`` of each mode; the torch import in each replay makes single runs noisy."""
    runs = {mode: [_replay_once(slow, mode) for _ in range(rounds)] for mode in ("minimal", "all")}
    results = {mode: {key: statistics.median(r[key] for r in runs[mode]) for key in runs[mode][0]} for mode in runs}
    results["minimal_vs_all"] = results["minimal"]["replay_s"] / results["all"]["replay_s"]
    return results


def _replay_once(slow: float, mode: str) -> dict:
    with KernelSession(extra_env=ENV) as kernel:
        for cell in _notebook(slow):
            _ok(kernel, cell)
        failing = kernel.run("loss = batch_loss(inputs, labels)")
        assert failing.status == "error", failing.error
        started = time.perf_counter()
        _ok(kernel, f"%cudaguard restart --replay {mode}")
        _ok(kernel, "pass")  # waits for the replay: a cell sent now runs after it
        wall = time.perf_counter() - started
        facts = _ok(
            kernel,
            "import nb_cudaguard\no = nb_cudaguard.get_guard().last_replay\n"
            "print(len(o.ran), o.seconds, sum(r.duration for r, _ in o.ran), sum(s for _, s in o.ran), "
            "o.failed is None)",
        ).split()
        cells, seconds, recorded, own = int(facts[-5]), float(facts[-4]), float(facts[-3]), float(facts[-2])
        assert facts[-1] == "True", "the replay must not fail"
        return {
            "cells": cells,
            "replay_s": seconds,
            "recorded_s": recorded,
            "overhead_s": seconds - recorded,
            "machinery_s": seconds - own,  # the replay loop's own cost: progress, capture, transform
            "restart_to_next_cell_s": wall,
        }


def _compile_package() -> None:
    """An installed package carries its bytecode. A checkout run with PYTHONDONTWRITEBYTECODE set (as on the
    machines here) would compile nb_cudaguard again in every new kernel and charge that to the in-place restart,
    which loads it; the baseline restarts do not."""
    import compileall

    compileall.compile_dir(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nb_cudaguard"), quiet=1
    )


def main() -> None:
    _compile_package()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slow", type=float, default=5.0)
    args = parser.parse_args()
    ready = restart_to_ready(args.rounds)
    print("## Restart to ready (no replay), median of", args.rounds)
    print(f"in-place exec:                          {ready['in_place']:.3f} s")
    print(f"jupyter_client restart_kernel():        {ready['restart_kernel']:.3f} s")
    print(f"jupyter_client restart_kernel(now=True): {ready['restart_kernel_now']:.3f} s")
    print(f"ratio in-place / restart_kernel():      {ready['ratio']:.2f}x (target <= 1.0x)")
    result = replay(args.slow, max(1, args.rounds // 2))
    print(f"\n## Replay, notebook with a {args.slow:g} s unrelated cell")
    for mode in ("minimal", "all"):
        r = result[mode]
        print(
            f"{mode:8} {r['cells']:.0f} cells: replay {r['replay_s']:.3f} s, recorded {r['recorded_s']:.3f} s, "
            f"overhead {r['overhead_s']:+.3f} s (target <= 0.5 s), replay loop's own cost {r['machinery_s']:.3f} s; "
            f"restart to next cell {r['restart_to_next_cell_s']:.2f} s"
        )
    print(f"minimal / all replay time: {result['minimal_vs_all']:.2f}x")


if __name__ == "__main__":
    main()
