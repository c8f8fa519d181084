"""Training survives the assert: time to ready after a restart with the snapshot against replaying the training,
in one run, and what the snapshots cost the training cells.

A real kernel trains a small transformer encoder for ``--seconds`` (in one cell; the issue's 60 s scaled to the
machine), then a training step with labels past the classes poisons the context. First ``%cudaguard restart`` with
snapshots (the training cell is skipped, its state loaded); then the same poisoning again and a restart with
``CudaGuard.snapshot = False``, which replays the training cell: the baseline, in the same kernel and run. The
success-path cost is what the snapshot hooks spent (``Snapshots.hook_seconds``: the walk, the fingerprints and the
copy's host side) over the training cells' own time.

    .venv/bin/python benchmarks/bench_snapshot.py --seconds 20            # the simulated GPU
    .venv/bin/python benchmarks/bench_snapshot.py --seconds 60 --gpu      # a real GPU
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from nb_cudaguard.cli.kernelsession import KernelSession  # noqa: E402

SETUP = """import time, torch
torch.manual_seed(0)
device = 'cuda' if torch.cuda.is_available() else 'cpu'
model = torch.nn.Sequential(
    torch.nn.Embedding(1000, {width}),
    torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer({width}, 4, 4 * {width}, batch_first=True), 4),
    torch.nn.Linear({width}, 10),
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10_000)
tokens = torch.randint(0, 1000, (32, 64)).to(device)
labels = torch.randint(0, 10, (32,)).to(device)"""
TRAIN = """started = time.perf_counter()
steps = 0
while time.perf_counter() - started < {seconds}:
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(tokens).mean(1), labels)
    loss.backward()
    opt.step()
    sched.step()
    steps += 1
torch.cuda.synchronize()"""
POISON = """opt.zero_grad()
loss = torch.nn.functional.cross_entropy(model(tokens).mean(1), labels + 10)
loss.backward()
opt.step()"""


def run(kernel: KernelSession, code: str, timeout: float = 600) -> str:
    result = kernel.run(code, timeout=timeout)
    if result.status != "ok":
        raise RuntimeError(f"{code[:60]!r}: {result.error} {result.stderr[-500:]}")
    return result.stdout


def value(kernel: KernelSession, expression: str):
    return ast.literal_eval(run(kernel, f"print(repr({expression}))").strip().splitlines()[-1])


def restart_seconds(kernel: KernelSession, seconds: float) -> tuple[float, str]:
    assert kernel.run(POISON).status == "error"
    begun = time.perf_counter()
    said = run(kernel, "%cudaguard restart", timeout=120)
    said += run(kernel, "print('ready')", timeout=seconds * 3 + 120)
    return time.perf_counter() - begun, said


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the training cell trains")
    parser.add_argument("--width", type=int, default=128, help="the transformer's model width")
    parser.add_argument("--gpu", action="store_true", help="a real GPU instead of the simulated one")
    args = parser.parse_args()
    env = {"PYTHONPATH": ROOT}
    with KernelSession(extra_env=env) as kernel:
        run(kernel, "%load_ext nb_cudaguard")
        if not args.gpu:
            run(kernel, "%cudaguard simulate on")
        run(kernel, SETUP.format(width=args.width))
        run(kernel, TRAIN.format(seconds=args.seconds), timeout=args.seconds * 3 + 60)
        guard = "__import__('nb_cudaguard').get_guard()"
        hook, cells = value(kernel, f"({guard}.snapshots.hook_seconds, {guard}.snapshots.cells_seconds)")
        copy = value(kernel, f"({guard}.snapshots.latest().nbytes, {guard}.snapshots.latest().copies.copy_seconds())")
        steps, params = value(kernel, "(steps, sum(p.numel() for p in model.parameters()))")
        with_snapshot, said = restart_seconds(kernel, args.seconds)
        assert "restored model" in said, said
        run(kernel, "%config CudaGuard.snapshot = False")
        run(kernel, "%cudaguard status")
        replayed, said_replay = restart_seconds(kernel, args.seconds)
        assert "restored" not in said_replay, said_replay
    device = "GPU" if args.gpu else "simulated GPU (CPU)"
    print(f"device: {device}; model: {params:,} parameters, {steps} training steps in {args.seconds:.0f} s")
    print(f"snapshot: {copy[0] / 1e6:.1f} MB (weights + AdamW moments), copied in {copy[1] * 1000:.1f} ms")
    if args.gpu and copy[1] > 0:
        print(f"copy bandwidth: {copy[0] / copy[1] / 1e9:.1f} GB/s")
    print(f"success path: {hook:.3f} s of snapshot hooks over {cells:.2f} s of cells = {hook / cells:.2%}")
    print(f"time to ready: {with_snapshot:.2f} s with the snapshot, {replayed:.2f} s replaying the training")
    print(f"speed-up: {replayed / with_snapshot:.1f}x")


if __name__ == "__main__":
    main()
