"""What the checks cost: training steps plain, under the fast checks and under the exact checks (%%cudacheck),
measured against each other in the same run.

CPU (default): a small transformer LM (2 layers, d=256, sequence 128, batch 16), a small CNN (batch 64, 32x32) and
a launch-bound step (a tiny transformer LM: d=64, sequence 32, batch 8, where the time goes to per-op overhead, as
on a GPU); one model each, the three kinds of step interleaved (the order rotates every repetition), median of the
per-repetition ratios. Each step is a cell: the fast steps run with the entry points in place (put there once per
block of steps, as ``%cudaguard check on`` does once) and include the read of the boards at the step's end (the
cell's one synchronisation); the exact steps enter and leave the dispatch mode around each step. "fast_loop" is the
fast mode with the block of steps as one cell (a training loop): the boards are read once, after the last step.

GPU (``--gpu``, needs CUDA): the LM step in four separate processes (plain, fast, exact, and plain with
CUDA_LAUNCH_BLOCKING=1, which must be set before CUDA starts). Skipped with a message without CUDA.

``--simulated`` runs the CPU comparison on the simulated GPU's device tensors (the checks as a GPU session runs
them, e.g. on a machine without one); its times carry the simulation's own per-op cost.

    PYTHONPATH=. python benchmarks/bench_guard.py [--repeats 9] [--threads 1] [--gpu] [--simulated]
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


LM = "transformer (2x256, seq 128, batch 16)"
MODES = ("plain", "fast", "fast_loop", "exact")


def _models(device: str):
    import torch
    from check_models import SmallCNN, TinyLM, cnn_batch, lm_batch

    torch.manual_seed(0)
    lm = TinyLM(vocab=1000, d_model=256, layers=2, heads=4, context=128).to(device)
    cnn = SmallCNN(classes=10).to(device)
    tiny = TinyLM(vocab=512, d_model=64, layers=2, heads=4, context=32).to(device)
    return {
        LM: (lm, lm_batch(16, 128, 1000, device=device)),
        "cnn (2 conv blocks, 32x32, batch 64)": (cnn, cnn_batch(64, device=device)),
        "launch-bound LM (2x64, seq 32, batch 8)": (tiny, lm_batch(8, 32, 512, device=device)),
    }


def _checker(mode: str):
    """The exact mode's checker for one step (the fast mode's is held for a block: ``_timed_block``)."""
    from nb_cudaguard.check.mode import Checker

    return Checker() if mode == "exact" else None


def _timed_step(model, optimizer, data, checker=None, cell_end=None) -> float:
    """One step; ``cell_end`` (the fast mode's read of the boards) runs inside the timing, as at a cell's end."""
    import torch
    from check_models import train_step

    synchronize = torch.cuda.synchronize if data[0].is_cuda else (lambda: None)
    synchronize()
    start = time.perf_counter()
    if checker is None:
        train_step(model, optimizer, *data)
    else:
        with checker:
            train_step(model, optimizer, *data)
    if cell_end is not None:
        cell_end()
    synchronize()
    return time.perf_counter() - start


def _timed_block(model, optimizer, data, mode: str, steps: int) -> list[float]:
    """``steps`` steps, each a cell. Fast: the entry points put in place once for the block, as
    ``%cudaguard check on`` does (not timed), and the boards read at the end of every step (timed). Exact: the
    dispatch mode entered and left around every step, as the every-cell exact mode does. Replacing methods of
    ``torch.Tensor`` invalidates CPython's attribute caches, so the first fast step after putting the entry points
    in place is slower; it is run untimed, since ``check on`` happens once, not once per cell."""
    from nb_cudaguard.check.fast.mode import FastChecker

    if mode not in ("fast", "fast_loop"):
        return [_timed_step(model, optimizer, data, _checker(mode)) for _ in range(steps)]
    checker = FastChecker().__enter__()
    try:
        _timed_step(model, optimizer, data, cell_end=checker.check)  # after `check on`, the first cell re-warms
        if mode == "fast":
            return [_timed_step(model, optimizer, data, cell_end=checker.check) for _ in range(steps)]
        # fast_loop: the block is one cell with a training loop in it: the boards are read once, after the loop
        times = [_timed_step(model, optimizer, data) for _ in range(steps - 1)]
        times.append(_timed_step(model, optimizer, data, cell_end=checker.check))
        return times
    finally:
        checker.leave()


def run_cpu(repeats: int, warmup: int = 2, device: str = "cpu") -> list[dict]:
    import torch

    results = []
    for name, (model, data) in _models(device).items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        launch_bound = name.startswith("launch")
        inner = 20 if launch_bound else 1  # steps per sample, so that a sample is not a few milliseconds
        rounds = 3 * repeats if launch_bound else repeats  # cheap, and the noisiest under load
        for _ in range(warmup):
            for mode in MODES:
                _timed_block(model, optimizer, data, mode, inner)
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        ratios: dict[str, list[float]] = {mode: [] for mode in MODES[1:]}
        for i in range(rounds):  # interleaved, the order rotating, so drift hits every kind alike
            order = MODES[i % len(MODES) :] + MODES[: i % len(MODES)]
            sample = {mode: statistics.mean(_timed_block(model, optimizer, data, mode, inner)) for mode in order}
            for mode in MODES:
                times[mode].append(sample[mode])
            for mode in ratios:
                ratios[mode].append(sample[mode] / sample["plain"])
        row = {"model": name, "repeats": rounds, "steps_per_sample": inner}
        for mode in MODES:
            row[f"{mode}_ms"] = 1000 * statistics.median(times[mode])
        for mode in ratios:  # the median of the per-round ratios, and the ratio of the medians
            row[f"{mode}_ratio"] = statistics.median(ratios[mode])
            row[f"{mode}_ratio_of_medians"] = row[f"{mode}_ms"] / row["plain_ms"]
        results.append(row)
    return results


def _gpu_child(kind: str, repeats: int) -> None:
    """One GPU process: median step time of each model, printed as JSON on the last line."""
    import torch

    found = {}
    for name, (model, data) in _models("cuda").items():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        _timed_block(model, optimizer, data, kind, 3)
        times = _timed_block(model, optimizer, data, kind, repeats)
        found[name] = 1000 * statistics.median(times)
    print(json.dumps({"kind": kind, "step_ms": found}))


def run_gpu(repeats: int) -> list[dict] | None:
    import torch

    if not torch.cuda.is_available():
        print("GPU benchmark skipped: CUDA is not available on this machine.")
        return None
    results = []
    kinds = [(mode, {}) for mode in MODES] + [("launch_blocking", {"CUDA_LAUNCH_BLOCKING": "1"})]
    for kind, extra_env in kinds:
        env = {**os.environ, **extra_env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        child = "plain" if kind == "launch_blocking" else kind
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
        row["ratio"] = {name: ms / base[name] for name, ms in row["step_ms"].items()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--gpu", action="store_true", help="also run the GPU comparison (separate processes)")
    parser.add_argument("--gpu-child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help="torch CPU threads (1 is steadiest on a shared machine)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="run the CPU comparison on the simulated GPU (nb_cudaguard.testing): the checks on device tensors, as "
        "on a GPU; its times include the simulation's own per-op cost, so they are no GPU or CPU figure",
    )
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.gpu_child:
        _gpu_child(args.gpu_child, args.repeats)
        return 0
    import torch

    if args.simulated:
        from nb_cudaguard import testing

        testing.enable()
    device = "cuda" if args.simulated else "cpu"
    report: dict = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": "simulated GPU" if args.simulated else "cpu",
        "cpu": run_cpu(args.repeats, device=device),
    }
    if args.gpu:
        report["gpu"] = run_gpu(args.repeats)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"torch {report['torch']}, {report['threads']} CPU threads, on {report['device']}, median of {args.repeats} "
        "interleaved rounds"
    )
    print("ratios: median of the per-round ratios (ratio of the medians)")
    print("fast: the boards read after every step (each step a cell); loop: read once per block (a cell's loop)")
    print(
        f"{'model':42} {'plain ms':>9} {'fast ms':>9} {'loop ms':>9} {'exact ms':>9} {'fast/plain':>17} "
        f"{'loop/plain':>17} {'exact/plain':>17}"
    )
    for row in report["cpu"]:
        ratios = [f"{row[f'{m}_ratio']:.3f} ({row[f'{m}_ratio_of_medians']:.3f})" for m in MODES[1:]]
        times = " ".join(f"{row[f'{m}_ms']:9.2f}" for m in MODES)
        print(f"{row['model']:42} {times} " + " ".join(f"{r:>17}" for r in ratios))
    for row in report.get("gpu") or []:
        for name, ms in row["step_ms"].items():
            print(f"GPU {row['kind']:16} {name:42} {ms:8.2f} ms/step  x{row['ratio'][name]:.3f} of plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
