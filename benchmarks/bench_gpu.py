"""The GPU figures of ``benchmarks/gpu_check.sh``: the device-to-host copy limit, the guard's step times on the GPU
(through ``bench_guard.run_gpu``: plain, fast, exact, plain with CUDA_LAUNCH_BLOCKING=1, each in its own process),
and the Markdown page (``docs/gpu-validation.md``) that puts them beside the gpu-marked tests and the snapshot's copy
bandwidth (``bench_snapshot.py --gpu``).

    python benchmarks/bench_gpu.py measure --repeats 5 > guard.json     # needs CUDA
    python benchmarks/bench_gpu.py report --logs DIR --out docs/gpu-validation.md
    python benchmarks/bench_gpu.py measure --dry-run                     # on a CPU: the same code, tiny sizes
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def d2h_limit(nbytes: int, repeats: int, device: str) -> dict:
    """The best device-to-host bandwidth this machine gets: one large copy into pinned memory, as the snapshot's
    copies are (a side stream into pinned memory), median and best of ``repeats``."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    pinned = device != "cpu"
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    times = []
    for _ in range(repeats + 1):
        if pinned:
            torch.cuda.synchronize()
        started = time.perf_counter()
        dst.copy_(src, non_blocking=pinned)
        if pinned:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    times = times[1:]  # the first copy pays for the first touch of the pages
    return {
        "bytes": nbytes,
        "median_gb_s": nbytes / statistics.median(times) / 1e9,
        "best_gb_s": nbytes / min(times) / 1e9,
    }


def measure(repeats: int, dry_run: bool) -> dict:
    import torch

    if dry_run:  # the same code paths on a CPU, small: the script is not dead code where no GPU is lent
        return {"device": "cpu (dry run)", "d2h": d2h_limit(1 << 20, 2, "cpu"), "guard": None}
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu: CUDA is not available (use --dry-run on a CPU)")
    from bench_guard import run_gpu

    return {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "d2h": d2h_limit(1 << 30, repeats, "cuda"),
        "guard": run_gpu(repeats),
    }


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def report(logs: Path) -> str:
    """The Markdown page from what gpu_check.sh left in ``logs``."""
    measured = json.loads(_read(logs / "gpu.json") or "{}")
    pytest_out = _read(logs / "pytest.txt")
    summary = [line for line in pytest_out.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    snapshot = _read(logs / "snapshot.txt")
    bandwidth = re.search(r"copy bandwidth: ([\d.]+) GB/s", snapshot)
    lines = [
        "# GPU validation",
        "",
        "Written by `benchmarks/gpu_check.sh` (do not edit by hand); rerun it on a machine with a GPU to refresh it.",
        "",
        f"- date: {_read(logs / 'date.txt').strip()}",
        f"- commit: `{_read(logs / 'commit.txt').strip()}`",
        f"- device: {_read(logs / 'device.txt').strip() or measured.get('device', 'unknown')}",
        f"- torch {measured.get('torch', '?')}, CUDA {measured.get('cuda', '?')}",
        "",
        "## The gpu-marked tests (`pytest -m gpu`)",
        "",
        f"Exit status {_read(logs / 'pytest.rc').strip() or '?'}: "
        + (summary[-1].strip("= ") if summary else "no summary"),
        "",
        "```text",
        *[line for line in pytest_out.splitlines() if line.startswith(("FAILED", "ERROR", "SKIPPED"))][:40],
        "```",
        "",
        "## The checks' cost on the GPU (`bench_guard.run_gpu`: one process per mode)",
        "",
        "| mode | model | ms/step | x plain |",
        "|---|---|---:|---:|",
    ]
    for row in measured.get("guard") or []:
        for model, ms in row["step_ms"].items():
            lines.append(f"| {row['kind']} | {model} | {ms:.2f} | {row['ratio'][model]:.3f} |")
    d2h = measured.get("d2h") or {}
    lines += [
        "",
        "## The snapshot's copy against the device-to-host limit",
        "",
        f"- D2H limit (pinned, {d2h.get('bytes', 0) / 2**20:.0f} MiB copies): "
        f"{d2h.get('median_gb_s', 0):.1f} GB/s median, {d2h.get('best_gb_s', 0):.1f} GB/s best",
    ]
    if bandwidth and d2h.get("best_gb_s"):
        share = float(bandwidth.group(1)) / d2h["best_gb_s"]
        lines.append(f"- the snapshot's copy (`bench_snapshot.py --gpu`): {bandwidth.group(1)} GB/s, {share:.0%} of it")
    else:
        lines.append("- the snapshot's copy: not measured (see its log below)")
    lines += ["", "```text", *snapshot.strip().splitlines()[-12:], "```", ""]
    shell = _read(logs / "shell.txt")
    lines += [
        "## The fast checks through the real shell (`bench_guard_shell.py --device cuda`, issue 32)",
        "",
        "The host time inside each check (`--probe`), the same batch every step and a new host batch copied every",
        "step (`--fresh`), then whole 4-step cells with the checks on and off (`--rounds 6`).",
        "",
        "```text",
        *shell.strip().splitlines(),  # stdout only: the benchmark's warnings went to shell.err
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="measure on the GPU and print JSON")
    run.add_argument("--repeats", type=int, default=5)
    run.add_argument("--dry-run", action="store_true", help="on a CPU: the same code on tiny sizes")
    page = commands.add_parser("report", help="write the Markdown page from gpu_check.sh's logs")
    page.add_argument("--logs", type=Path, required=True)
    page.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure(args.repeats, args.dry_run), indent=2))
    else:
        args.out.write_text(report(args.logs))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
