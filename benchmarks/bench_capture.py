"""Cost of the output capture on a cell that prints 50 MB, with and without the extension, in one run.

Three routes: Python-level print in a kernel (ipykernel's OutStream; our `stream` tap), C-level writes to fd 1 in a
kernel (ipykernel's fd pipe, then the same tap), and C-level writes in terminal IPython (our own `fd` tap, the
output going to /dev/null). Repetitions alternate between the plain and the guarded setup.

    python benchmarks/bench_capture.py [--mb 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from nb_cudaguard.kernelsession import KernelSession


def kernel_cells(mb: int) -> dict[str, str]:
    line = "x" * 1023 + "\\n"
    return {
        "kernel, print()": f"import sys\ns = '{line}' * 64\nfor _ in range({mb} * 16):\n    sys.stdout.write(s)\n",
        "kernel, os.write(1)": f"import os\nb = b'{line}' * 1024\nfor _ in range({mb}):\n    os.write(1, b)\n",
    }


def drain_run(session: KernelSession, code: str) -> float:
    received = [0]

    def hook(msg):
        if msg["msg_type"] == "stream":
            received[0] += len(msg["content"]["text"])

    start = time.perf_counter()
    session.kc.execute_interactive(code, timeout=600, output_hook=hook)
    return time.perf_counter() - start


def terminal_run(mb: int, with_extension: bool) -> float:
    lines = ["%load_ext nb_cudaguard"] if with_extension else []
    lines += ["import os", "b = b'y' * (1 << 20)", f"_ = [os.write(1, b) for _ in range({mb})]"]
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "--HistoryManager.hist_file=:memory:"],
        input="\n".join(lines) + "\n",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        check=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with KernelSession() as plain, KernelSession() as guarded:
        guarded.run("%load_ext nb_cudaguard")
        for name, code in kernel_cells(args.mb).items():
            results[name] = {"plain": [], "nb_cudaguard": []}
            for _ in range(args.repeat):
                results[name]["plain"].append(drain_run(plain, code))
                results[name]["nb_cudaguard"].append(drain_run(guarded, code))
    name = "terminal IPython, os.write(1)"
    results[name] = {"plain": [], "nb_cudaguard": []}
    for _ in range(args.repeat):
        results[name]["plain"].append(terminal_run(args.mb, False))
        results[name]["nb_cudaguard"].append(terminal_run(args.mb, True))
    print(f"{args.mb} MB per cell, {args.repeat} alternating repetitions, medians:")
    for name, runs in results.items():
        plain, guarded = statistics.median(runs["plain"]), statistics.median(runs["nb_cudaguard"])
        print(f"  {name:<32} plain {plain:7.3f} s  nb_cudaguard {guarded:7.3f} s  ratio {guarded / plain:.3f}")


if __name__ == "__main__":
    main()
