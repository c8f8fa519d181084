"""What record/copies.py costs each host-to-device copy: ``x.to(device)`` of a small label batch, plain and with the
copy remembered (the meta device stands for the GPU: a copy with no values, so only the host's work is timed).

    PYTHONPATH=. python benchmarks/bench_copies.py
"""

from __future__ import annotations

import time

import torch

from nb_cudaguard.record.copies import COPIES

CALLS, ROUNDS = 200_000, 5


def per_copy_us() -> float:
    batch = torch.arange(16)
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            batch.to("meta")
        best = min(best, (time.perf_counter() - started) / CALLS)
    return best * 1e6


def main() -> None:
    plain = per_copy_us()
    COPIES.install()
    try:
        seen = per_copy_us()
    finally:
        COPIES.uninstall()
    print(f"torch {torch.__version__}: x.to('meta') of a 16-element int64 batch, best of {ROUNDS} x {CALLS:,}:")
    print(f"  plain {plain:.2f} us, with record.copies {seen:.2f} us: +{seen - plain:.2f} us per copy")


if __name__ == "__main__":
    main()
