"""How long ``nb-cudaguard explain`` takes on a 32 MB log of 100,000 device assertion lines, end to end.

A crashed multi-GPU job leaves a log with one assertion line per failing thread; the explainer reads it whole,
parses every line and folds them into counts. The baseline, measured in the same run, is the same command on the
log's last 101 lines (the interpreter's start, the imports and the diagnosis, with almost no parsing); the ratio
and the difference are what reading 100,000 lines costs. Target: under 2 s in all.

    PYTHONPATH=. python benchmarks/bench_explain_log.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 5
LINE = (
    "/pytorch/aten/src/THC/THCTensorIndex.cu:361: void indexSelectLargeIndex(TensorInfo<T, IndexType>, "
    "TensorInfo<T, IndexType>, TensorInfo<long, IndexType>, int, int, IndexType, IndexType, long) [with T = "
    "float, IndexType = unsigned int]: block: [{b},0,0], thread: [{t},0,0] Assertion `srcIndex < "
    "srcSelectDimSize` failed.\n"
)
END = "Traceback (most recent call last):\nRuntimeError: CUDA error: device-side assert triggered\n"


def _seconds(log: Path) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nb_cudaguard", "explain", str(log), "--json"], capture_output=True,
                       check=True)  # fmt: skip
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    lines = [LINE.format(b=i // 128, t=i % 128) for i in range(100_000)]
    with tempfile.TemporaryDirectory() as directory:
        big, small = Path(directory, "big.log"), Path(directory, "small.log")
        big.write_text("".join(lines) + END)
        small.write_text("".join(lines[-101:]) + END)
        base, whole = _seconds(small), _seconds(big)
    size = len(("".join(lines) + END).encode())
    print(f"log of {size / 1e6:.1f} MB, 100,000 assertion lines: {whole:.2f} s (median of {RUNS})")
    print(f"same command on 101 lines: {base:.2f} s; ratio {whole / base:.2f}x, +{whole - base:.2f} s")


if __name__ == "__main__":
    main()
