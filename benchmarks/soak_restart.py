"""Run the restart tests many times in a row and count what a flaky restart would show.

    python benchmarks/soak_restart.py --runs 20                    # this interpreter's ipykernel
    .nox/tests_ipykernel6/bin/python benchmarks/soak_restart.py   # ipykernel 6, from the nox session's venv

Each run is one pytest process over the restart test files (real kernels, real restarts). Reported: runs that
passed, tests passed and failed over all runs, and what stayed behind in nb_cudaguard's private directories
(handoffs, half-written files, carried values) once every kernel has ended. A failed run's whole pytest output and
its kernels' logs are kept under ``--keep`` (``run-N.txt``, ``run-N.kernels.log``) to be read afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = [
    "tests/relaunch/test_restart_kernel.py",
    "tests/relaunch/test_restart_faults.py",
    "tests/relaunch/test_restart_full_disk.py",
    "tests/carry/test_carry_kernel.py",
]


def leftovers() -> list[str]:
    uid = os.getuid()
    roots = [Path(tempfile.gettempdir()) / f"nb_cudaguard-{uid}", Path("/dev/shm") / f"nb_cudaguard-{uid}"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        roots.append(Path(runtime) / "nb_cudaguard")
    from jupyter_core.paths import jupyter_runtime_dir

    roots.append(Path(jupyter_runtime_dir()) / f"nb_cudaguard-{uid}")
    return sorted(str(p) for root in roots if root.is_dir() for p in root.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep", type=Path, default=None, help="for failed runs (out/soak-ipykernel-V)")
    args = parser.parse_args()
    import ipykernel

    from nb_cudaguard.cli.kernelsession import KERNEL_LOG_ENV

    keep = args.keep or Path("out") / f"soak-ipykernel-{ipykernel.__version__}"
    keep.mkdir(parents=True, exist_ok=True)

    before = set(leftovers())
    runs_ok, passed, failed = 0, 0, 0
    for run in range(1, args.runs + 1):
        log = keep / f"run-{run}.kernels.log"
        log.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
            capture_output=True,
            text=True,
            env={**os.environ, KERNEL_LOG_ENV: str(log.resolve())},
        )
        tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
        passed += int(m.group(1)) if (m := re.search(r"(\d+) passed", tail)) else 0
        failed += int(m.group(1)) if (m := re.search(r"(\d+) failed", tail)) else 0
        runs_ok += done.returncode == 0
        print(f"run {run}: {tail}", flush=True)
        if done.returncode != 0:
            print("\n".join(line for line in done.stdout.splitlines() if line.startswith(("FAILED", "E "))))
            (keep / f"run-{run}.txt").write_text(done.stdout + done.stderr)
            print(f"  kept: {keep / f'run-{run}.txt'}, {log}")
        else:
            log.unlink(missing_ok=True)
    left = sorted(set(leftovers()) - before)
    version = ipykernel.__version__
    print(f"ipykernel {version}: {runs_ok}/{args.runs} runs passed; tests {passed} passed, {failed} failed")
    print(f"left behind in nb_cudaguard's private directories: {len(left)}" + "".join(f"\n  {p}" for p in left))


if __name__ == "__main__":
    main()
