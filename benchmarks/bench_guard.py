"""What %%cudacheck costs: training steps guarded vs plain, measured against each other in the same run.

CPU (default): a small transformer LM (2 layers, d=256, sequence 128, batch 16) and a small CNN (batch 64, 32x32),
one model each, plain and guarded steps interleaved, median of the per-pair ratios.

GPU (``--gpu``, needs CUDA): the LM step in three separate processes (plain, guarded, and plain with
CUDA_LAUNCH_BLOCKING=1, which must be set before CUDA starts); the guarded run must cost less than the
launch-blocking one. Skipped with a message without CUDA.

    PYTHONPATH=. python benchmarks/bench_guard.py [--repeats 9] [--threads 1] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _models(device: str):
    import torch
    from guard_models import SmallCNN, TinyLM, cnn_batch, lm_batch

    torch.manual_seed(0)
    lm = TinyLM(vocab=1000, d_model=256, layers=2, heads=4, context=128).to(device)
    cnn = SmallCNN(classes=10).to(device)
    return {
        "transformer (2x256, seq 128, batch 16)": (lm, lm_batch(16, 128, 1000, device=device)),
        "cnn (2 conv blocks, 32x32, batch 64)": (cnn, cnn_batch(64, device=device)),
    }


def _timed_step(model, optimizer, data, checker=None) -> float:
    import torch
    from guard_models import train_step

    synchronize = torch.cuda.synchronize if data[0].is_cuda else (lambda: None)
    synchronize()
    start = time.perf_counter()
    if checker is None:
        train_step(model, optimizer, *data)
    else:
        with checker:
            train_step(model, optimizer, *data)
    synchronize()
    return time.perf_counter() - start


def run_cpu(repeats: int, warmup: int = 2) -> list[dict]:
    import torch

    from nb_cudaguard.check.mode import Checker

    results = []
    for name, (model, data) in _models("cpu").items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for _ in range(warmup):
            _timed_step(model, optimizer, data)
            _timed_step(model, optimizer, data, Checker())
        plain, guarded, ratios = [], [], []
        for i in range(repeats):  # interleaved, alternating which goes first, so drift hits both alike
            pair = {}
            for kind in ("plain", "guarded") if i % 2 == 0 else ("guarded", "plain"):
                pair[kind] = _timed_step(model, optimizer, data, Checker() if kind == "guarded" else None)
            plain.append(pair["plain"])
            guarded.append(pair["guarded"])
            ratios.append(pair["guarded"] / pair["plain"])
        results.append(
            {
                "model": name,
                "plain_ms": 1000 * statistics.median(plain),
                "guarded_ms": 1000 * statistics.median(guarded),
                "ratio": statistics.median(ratios),
                "repeats": repeats,
            }
        )
    return results


def _gpu_child(kind: str, repeats: int) -> None:
    """One GPU process: median LM step time, printed as JSON on the last line."""
    import torch

    from nb_cudaguard.check.mode import Checker

    model, data = _models("cuda")["transformer (2x256, seq 128, batch 16)"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    make_checker = (lambda: Checker()) if kind == "guarded" else (lambda: None)
    for _ in range(3):
        _timed_step(model, optimizer, data, make_checker())
    times = [_timed_step(model, optimizer, data, make_checker()) for _ in range(repeats)]
    print(json.dumps({"kind": kind, "step_ms": 1000 * statistics.median(times)}))


def run_gpu(repeats: int) -> list[dict] | None:
    import torch

    if not torch.cuda.is_available():
        print("GPU benchmark skipped: CUDA is not available on this machine.")
        return None
    results = []
    for kind, extra_env in (("plain", {}), ("guarded", {}), ("launch_blocking", {"CUDA_LAUNCH_BLOCKING": "1"})):
        env = {**os.environ, **extra_env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        child = "guarded" if kind == "guarded" else "plain"
        out = subprocess.run(
            [sys.executable, __file__, "--gpu-child", child, "--repeats", str(repeats)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results.append({**json.loads(out.strip().splitlines()[-1]), "kind": kind})
    base = results[0]["step_ms"]
    for row in results:
        row["ratio"] = row["step_ms"] / base
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--gpu", action="store_true", help="also run the GPU comparison (separate processes)")
    parser.add_argument("--gpu-child", choices=["plain", "guarded"], help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help="torch CPU threads (1 is steadiest on a shared machine)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.gpu_child:
        _gpu_child(args.gpu_child, args.repeats)
        return 0
    import torch

    report: dict = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": run_cpu(args.repeats)}
    if args.gpu:
        report["gpu"] = run_gpu(args.repeats)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"torch {report['torch']}, {report['threads']} CPU threads, median of {args.repeats} interleaved pairs")
    print(f"{'model':42} {'plain ms':>10} {'guarded ms':>11} {'guarded/plain':>14}")
    for row in report["cpu"]:
        print(f"{row['model']:42} {row['plain_ms']:10.1f} {row['guarded_ms']:11.1f} {row['ratio']:14.3f}")
    for row in report.get("gpu") or []:
        print(f"GPU {row['kind']:16} {row['step_ms']:8.2f} ms/step  x{row['ratio']:.2f} of plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
