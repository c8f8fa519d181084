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
import tempfile
import time
from pathlib import Path

from nb_cudaguard.cli.kernelsession import KernelSession


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


TERMINAL_CELLS = {
    "terminal IPython, print()": "_ = [print(s, end='') for _ in range({mb} * 1024)]",
    "terminal IPython, os.write(1)": "_ = [os.write(1, b) for _ in range({mb})]",
}


def terminal_run(mb: int, cell: str, with_extension: bool, tmp: Path) -> float:
    """Time the cell itself (and the hooks around it) from inside the session, not IPython's start. The output
    goes to a pipe that this process reads, as a terminal or a log collector would."""
    result = tmp / "elapsed.txt"
    lines = ["%load_ext nb_cudaguard"] if with_extension else []
    lines += [
        "import os, time",
        "b = b'y' * (1 << 20)",
        "s = 'y' * 1023 + chr(10)",
        "t0 = time.perf_counter()",
        cell.format(mb=mb),
        f"_ = open({str(result)!r}, 'w').write(str(time.perf_counter() - t0))",
    ]
    subprocess.run(
        [sys.executable, "-m", "IPython", "--quick", "--no-banner", "--HistoryManager.hist_file=:memory:"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.read_text())


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
    with tempfile.TemporaryDirectory() as tmp:
        for name, cell in TERMINAL_CELLS.items():
            results[name] = {"plain": [], "nb_cudaguard": []}
            for _ in range(args.repeat):
                results[name]["plain"].append(terminal_run(args.mb, cell, False, Path(tmp)))
                results[name]["nb_cudaguard"].append(terminal_run(args.mb, cell, True, Path(tmp)))
    print(f"{args.mb} MB per cell, {args.repeat} alternating repetitions, medians:")
    for name, runs in results.items():
        plain, guarded = statistics.median(runs["plain"]), statistics.median(runs["nb_cudaguard"])
        print(f"  {name:<32} plain {plain:7.3f} s  nb_cudaguard {guarded:7.3f} s  ratio {guarded / plain:.3f}")


if __name__ == "__main__":
    main()
