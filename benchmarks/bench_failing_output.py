"""A cell that prints one long line and then fails: what the report costs on top of IPython's own traceback.

The report reads the cell's kept output (its last ``CudaGuard.capture_limit`` characters) with the catalog's
patterns; a pattern that restarts at every position of a long run of word characters is quadratic in it. Each round
runs the same failing cell in a plain kernel and in one with ``%load_ext nb_cudaguard``, alternating which goes
first, and reports the round trip of each.

    python benchmarks/bench_failing_output.py [--mb 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from nb_cudaguard.cli.kernelsession import KernelSession


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=3.0, help="size of the one line printed before the error")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cell = f"import os\nos.write(1, b'z' * {int(args.mb * 1e6)} + b'\\n')\n1/0"
    times: dict[str, list[float]] = {"plain": [], "nb_cudaguard": []}
    with KernelSession() as plain, KernelSession() as guarded:
        guarded.run("%load_ext nb_cudaguard")
        kernels = [("plain", plain), ("nb_cudaguard", guarded)]
        for round_ in range(args.rounds):
            for name, kernel in kernels if round_ % 2 == 0 else kernels[::-1]:
                begun = time.perf_counter()
                result = kernel.run(cell, timeout=600)
                times[name].append(time.perf_counter() - begun)
                assert result.status == "error", result.status
    plain_s, guarded_s = statistics.median(times["plain"]), statistics.median(times["nb_cudaguard"])
    print(f"| {args.mb:g} MB on one line, then 1/0 | {plain_s:.3f} s | {guarded_s:.3f} s | {guarded_s / plain_s:.2f} |")


if __name__ == "__main__":
    main()
