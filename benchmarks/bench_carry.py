"""Carry benchmark: time to a ready state after a device-side assert, carrying CPU values vs plain replay.

The notebook: a data-loading cell that takes ``--load`` seconds (``time.sleep``) and builds a ~200 MB CPU object
(numpy arrays), a model cell, and a failing cell that poisons the (simulated) GPU. Each round starts a fresh kernel,
runs the notebook, then restarts with ``%cudaguard restart`` (carry) or ``%cudaguard restart --no-carry`` (the
baseline, in the same run), and times from the restart request to the reply of the next cell, which waits for
the rebuild. Target: ratio >= 3. The serialisation throughput is read from the plan the restart prints.

Run: ``PYTHONPATH=$PWD python benchmarks/bench_carry.py [--rounds 1] [--load 5]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nb_cudaguard.kernelsession import KernelSession

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


def one_round(load: float, carry: bool) -> tuple[float, float, float]:
    """(seconds to ready, serialisation bytes/s, checksum of frame after the rebuild)."""
    with KernelSession(extra_env=ENV) as kernel:
        for cell in _notebook(load):
            _ok(kernel, cell)
        if kernel.run(FAILING).status != "error":
            raise RuntimeError("the failing cell did not fail")
        started = time.perf_counter()
        printed = _ok(kernel, "%cudaguard restart" + ("" if carry else " --no-carry"))
        after = _ok(kernel, "print(float(frame['price'].sum()))")
        ready = time.perf_counter() - started
        throughput = 0.0
        found = re.search(r"carried frame: ([\d.]+) MB, pickled in ([\d.]+) s", printed)
        if found:
            throughput = float(found.group(1)) * 1e6 / float(found.group(2))
        if carry and not found:
            raise RuntimeError("frame was not carried:\n" + printed)
        return ready, throughput, float(after.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--load", type=float, default=5.0)
    args = parser.parse_args()
    carry, plain, rates, sums = [], [], [], set()
    for _ in range(args.rounds):  # alternate, so that a busy machine slows both alike
        ready, rate, checksum = one_round(args.load, True)
        carry.append(ready)
        rates.append(rate)
        sums.add(checksum)
        ready, _, checksum = one_round(args.load, False)
        plain.append(ready)
        sums.add(checksum)
    assert len(sums) == 1, f"carried and replayed frames differ: {sums}"
    c, p = statistics.median(carry), statistics.median(plain)
    print(f"time to ready, carry plan : {c:.2f} s (rounds: {', '.join(f'{t:.2f}' for t in carry)})")
    print(f"time to ready, plain replay: {p:.2f} s (rounds: {', '.join(f'{t:.2f}' for t in plain)})")
    print(f"speed-up: {p / c:.2f}x (target >= 3x)")
    print(f"serialisation throughput (pickle + sha256 + write, 200 MB): {statistics.median(rates) / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
