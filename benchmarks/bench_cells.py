"""Overhead of the extension on the round trip of trivial cells, through real kernels, in one run.

Two kernels, one with nb_cudaguard and one without, run the same trivial cells in interleaved blocks (so that
machine noise hits both alike). Reports the per-cell round-trip medians and means and their ratio, and checks that
the success path touched neither torch's CUDA state nor the probe.

    python benchmarks/bench_cells.py [--cells 2000] [--block 100] [--namespace none|typical|large|huge]

``--namespace`` fills both kernels with the same state first, since what the extension does at each cell's end
must not grow with it: ``typical`` is 3 models of 200 layers, an optimizer and 100 tensors; ``large`` 2000 tensors
and 50 small models; ``huge`` 10,000 tensors and 100 models.
"""

from __future__ import annotations

import argparse
import statistics
import time

from nb_cudaguard.cli.kernelsession import KernelSession

COUNT_PROBES = (
    "import nb_cudaguard.incident.probe as _p\n"
    "_calls = []\n"
    "_orig = _p.active_probe\n"
    "def _counted():\n"
    "    _calls.append(1)\n"
    "    return _orig()\n"
    "_p.active_probe = _counted\n"
    "import nb_cudaguard.incident.incident as _i\n"
    "_i.active_probe = _counted\n"
)


NAMESPACES = {
    "none": "",
    "typical": (
        "models = [torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(200)]) for _ in range(3)]\n"
        "model_a, model_b, model_c = models\n"
        "opt = torch.optim.AdamW(model_a.parameters())\n"
        "model_a(torch.randn(2, 16)).sum().backward()\nopt.step()\n"
        "for n in range(100):\n    globals()[f't{n}'] = torch.randn(8)\n"
    ),
    "large": (
        "for n in range(2000):\n    globals()[f't{n}'] = torch.randn(8)\n"
        "for n in range(50):\n    globals()[f'm{n}'] = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n"
    ),
    "huge": (
        "for n in range(10000):\n    globals()[f't{n}'] = torch.randn(8)\n"
        "for n in range(100):\n    globals()[f'm{n}'] = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n"
    ),
}


def round_trip(session: KernelSession, code: str) -> float:
    start = time.perf_counter()
    reply = session.kc.execute_interactive(code, timeout=60, output_hook=lambda msg: None)
    elapsed = time.perf_counter() - start
    assert reply["content"]["status"] == "ok", reply["content"]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--namespace", choices=sorted(NAMESPACES), default="none")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"plain": [], "nb_cudaguard": []}
    with KernelSession() as plain, KernelSession() as guarded:
        guarded.run("%load_ext nb_cudaguard")
        for session in (plain, guarded):
            session.run("import torch")
            assert session.run(NAMESPACES[args.namespace], timeout=300).status == "ok"
        guarded.run(COUNT_PROBES)
        for warm in range(50):
            round_trip(plain, f"w = {warm}")
            round_trip(guarded, f"w = {warm}")
        done = 0
        while done < args.cells:
            for name, session in (("plain", plain), ("nb_cudaguard", guarded)):
                for n in range(done, done + args.block):
                    times[name].append(round_trip(session, f"x = {n} + 1"))
            done += args.block
        checks = guarded.run(
            "print(len(_calls), torch.cuda.is_initialized(), len(get_ipython()._nb_cudaguard.journal),"
            " get_ipython()._nb_cudaguard.snapshots.hook_seconds)"
        )
    probe_calls, cuda_initialised, journal, hook_seconds = checks.stdout.split()
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    print(f"cells per kernel: {args.cells} (blocks of {args.block}, interleaved), namespace: {args.namespace}")
    for name in times:
        print(f"{name:>13}: median {med[name] * 1e3:.3f} ms, mean {mean[name] * 1e3:.3f} ms")
    print(f"ratio (median): {med['nb_cudaguard'] / med['plain']:.3f}")
    print(f"ratio (mean):   {mean['nb_cudaguard'] / mean['plain']:.3f}")
    print(f"extra per cell (median): {(med['nb_cudaguard'] - med['plain']) * 1e3:+.3f} ms")
    print(f"success path: probe calls {probe_calls}, torch.cuda.is_initialized() {cuda_initialised}, journal {journal}")
    print(f"snapshot hook, in the kernel: {float(hook_seconds) / int(journal) * 1e6:.1f} us per cell on average")


if __name__ == "__main__":
    main()
