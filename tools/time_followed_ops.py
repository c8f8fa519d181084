"""What following the device ops costs the user's own indexing and concatenation (record/copies.py).

    PYTHONPATH=. python tools/time_followed_ops.py

``Tensor.__getitem__`` and ``torch.cat`` are timed plain and wrapped, interleaved (the machine's load moves both
alike), with one host-to-device copy live so that the wrappers take their slow path. Host tensors: the common case,
which the wrapper only has to let through.
"""

from __future__ import annotations

import statistics
import time

import torch

from nb_cudaguard.record.copies import COPIES

ROUNDS, CALLS = 15, 20000


def _per_call(step) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        step()
    return (time.perf_counter() - started) / CALLS * 1e6


def main() -> None:
    x, index, a, b = torch.arange(1000), torch.tensor([1, 2, 3]), torch.randn(16, 8), torch.randn(16, 8)
    plain = {"__getitem__": torch.Tensor.__getitem__, "cat": torch.cat}
    COPIES.install()
    live = torch.arange(4).to("meta")  # one live copy: the wrappers' slow path
    wrapped = {"__getitem__": torch.Tensor.__getitem__, "cat": torch.cat}
    steps = {"x[tensor]": lambda: x[index], "x[3:7]": lambda: x[3:7], "torch.cat": lambda: torch.cat([a, b])}
    times: dict[str, dict[str, list[float]]] = {name: {"plain": [], "wrapped": []} for name in steps}
    for _ in range(ROUNDS):
        for how, methods in (("plain", plain), ("wrapped", wrapped)):
            torch.Tensor.__getitem__, torch.cat = methods["__getitem__"], methods["cat"]
            for name, step in steps.items():
                times[name][how].append(_per_call(step))
    COPIES.uninstall()
    del live
    for name, by in times.items():
        p, w = statistics.median(by["plain"]), statistics.median(by["wrapped"])
        print(f"{name}: {p:.2f} us plain, {w:.2f} us wrapped, +{w - p:.2f} us (median of {ROUNDS} interleaved rounds)")


if __name__ == "__main__":
    main()
