"""Carry benchmark: time to a ready state after a device-side assert, carrying CPU values vs plain replay.

The notebook: a data-loading cell that takes ``--load`` seconds (``time.sleep``) and builds a ~200 MB CPU object
(numpy arrays), a model cell, and a failing cell that poisons the (simulated) GPU. Each round starts a fresh kernel,
runs the notebook, then restarts with ``%cudaguard restart`` (carry) or ``%cudaguard restart --no-carry`` (the
baseline, in the same run), and times from the restart request to the reply of the next cell, which waits for
the rebuild. Target: ratio >= 3. It also prints the parts, as medians: the restart cell (in the old process: the
carry plan pickles the values there), the replay (in the new one) and each replayed cell, and for the carried
values the time to read and check them (on a thread, beside the replay), how long the replay waited for that, and
the unpickling. The serialisation throughput is read from the plan the restart prints. The ceiling is the ratio a
carry that cost nothing would reach in the same run: the plain replay's time without the cells the carry skips.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_carry.py [--rounds 1] [--load 5]``
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nb_cudaguard.cli.kernelsession import KernelSession

ENV = {"PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}


def _notebook(load: float) -> list[str]:
    return [
        "%load_ext nb_cudaguard",
        "import time\nimport numpy as np\nimport torch",
        f"time.sleep({load})\nrng = np.random.default_rng(0)\n"
        "frame = {'price': rng.random(12_500_000), 'qty': rng.random(12_500_000)}  # 200 MB",
        "torch.manual_seed(0)\nmodel = torch.nn.Linear(2, 3)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "%cudaguard simulate on",
    ]


FAILING = (
    "x = torch.tensor(np.stack([frame['price'][:4], frame['qty'][:4]], 1), dtype=torch.float32)\n"
    "loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 7]))"
)


def _ok(kernel: KernelSession, code: str) -> str:
    result = kernel.run(code, timeout=300)
    if result.status != "ok":
        raise RuntimeError(f"{code!r} failed: {result.error} {result.stderr}")
    return result.stdout + "".join(result.texts())


def _number(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else None


def one_round(load: float, carry: bool) -> dict:
    """Seconds to ready and its parts, the serialisation rate, and a checksum of frame after the rebuild."""
    with KernelSession(extra_env=ENV) as kernel:
        for cell in _notebook(load):
            _ok(kernel, cell)
        if kernel.run(FAILING).status != "error":
            raise RuntimeError("the failing cell did not fail")
        started = time.perf_counter()
        printed = _ok(kernel, "%cudaguard restart" + ("" if carry else " --no-carry"))
        restart_cell = time.perf_counter() - started
        after = _ok(kernel, "print(float(frame['price'].sum()))")
        ready = time.perf_counter() - started
        replay = "__import__('nb_cudaguard').get_guard().last_replay"
        ran = _ok(kernel, f"print(repr([(r.first_line, s) for r, s in {replay}.ran]))")
        facts = {
            "ready": ready,
            "restart cell": restart_cell,
            "replay": _number(r"replayed \d+/\d+ cell\(s\) in ([\d.]+) s", after),
            "checksum": float(after.strip().splitlines()[-1]),
            "cells": dict(ast.literal_eval(ran.strip().splitlines()[-1])),
        }
        if carry:
            found = re.search(r"carried frame: ([\d.]+) MB, pickled in ([\d.]+) s", printed)
            if not found:
                raise RuntimeError("frame was not carried:\n" + printed)
            facts["rate"] = float(found.group(1)) * 1e6 / float(found.group(2))
            facts["read and checked (beside the replay)"] = _number(r"read and checked in ([\d.]+) s", after)
            facts["waited for"] = _number(r"\(([\d.]+) s waited for\)", after)
            facts["unpickled"] = _number(r"unpickled in ([\d.]+) s", after)
        return facts


def _median(rounds: list[dict], key: str) -> str:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return f"{statistics.median(values):.2f} s" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--load", type=float, default=5.0)
    args = parser.parse_args()
    rounds: dict[str, list[dict]] = {"carry": [], "plain": []}
    for _ in range(args.rounds):  # alternate, so that a busy machine slows both alike
        rounds["carry"].append(one_round(args.load, True))
        rounds["plain"].append(one_round(args.load, False))
    sums = {r["checksum"] for runs in rounds.values() for r in runs}
    assert len(sums) == 1, f"carried and replayed frames differ: {sums}"
    c, p = (statistics.median(r["ready"] for r in rounds[mode]) for mode in ("carry", "plain"))
    for mode, label in (("carry", "carry plan "), ("plain", "plain replay")):
        times = ", ".join(f"{r['ready']:.2f}" for r in rounds[mode])
        print(f"time to ready, {label}: {statistics.median(r['ready'] for r in rounds[mode]):.2f} s (rounds: {times})")
    print(f"speed-up: {p / c:.2f}x (target >= 3x)")
    replayed = {mode: {line for r in rounds[mode] for line in r["cells"]} for mode in rounds}
    skipped = replayed["plain"] - replayed["carry"]
    d = sum(statistics.median(r["cells"][line] for r in rounds["plain"] if line in r["cells"]) for line in skipped)
    print(
        f"ceiling here: {p / (p - d):.2f}x (a carry that cost nothing: plain replay without the {d:.2f} s of the "
        f"cells it skips); reached {(p / c) / (p / (p - d)):.0%} of it"
    )
    print("medians of the parts                      carry      plain")
    for key in ("restart cell", "replay"):
        print(f"  {key:<40}{_median(rounds['carry'], key):>7}  {_median(rounds['plain'], key):>9}")
    cells = sorted({line for runs in rounds.values() for r in runs for line in r["cells"]})
    for line in cells:
        times = {mode: [r["cells"][line] for r in runs if line in r["cells"]] for mode, runs in rounds.items()}
        shown = {mode: f"{statistics.median(t):.2f} s" if t else "-" for mode, t in times.items()}
        print(f"    replayed: {line[:30]:<30}{shown['carry']:>7}  {shown['plain']:>9}")
    for key in ("read and checked (beside the replay)", "waited for", "unpickled"):
        print(f"  carried values: {key:<24}{_median(rounds['carry'], key):>7}")
    rate = statistics.median(r["rate"] for r in rounds["carry"])
    print(f"serialisation throughput (pickle + sha256 + write, 200 MB, in the restart cell): {rate / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
