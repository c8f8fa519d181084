"""What ``%cudaguard check on`` costs through the real path: a real IPython shell with nb_cudaguard loaded, training
cells of 1, 4 and 32 steps, the same cells with the checks on and off interleaved in the same run.

The model is the issue's small step (an embedding, a mean over the sequence, a linear layer, cross-entropy,
AdamW) at several sizes, from about 1 ms a step to about 50 ms. Each round, for each size, the two states run in
turn (the order alternating every round): ``%cudaguard check on`` or ``off`` (not timed), one untimed 1-step cell
(what switching costs once: CPython's attribute caches, refilled), then one timed cell of each length, each timed
around ``shell.run_cell`` (the cell as the user waits for it: IPython's and nb_cudaguard's per-cell work, the cell's
code, and with the checks on the read of the boards at the cell's end). Reported per size and cell length: the
median of the per-round ratios on/off with their quartiles (the noise), and the host microseconds per checked op,
``(on - off) / checks``, where ``checks`` is counted by the fast mode itself (every checked call: a verdict taken,
``BOARD.checks``, one reused from an earlier check of the same unchanged tensor, ``fast.known``, printed as
``reused``, or one whose values the host read at once, ``fast.readable``), not assumed. The cell passes the same
``x, y`` every step, as the issue's step does; ``--fresh`` passes ``x.clone(), y.clone()`` in both states instead,
a new tensor every step as a data loader gives, so that no verdict can be reused. ``--device cuda`` puts the model
and the batch on the GPU (``--fresh``: a new host batch copied there every step, as a loader's is);
``benchmarks/gpu_check.sh`` runs it there.

``--probe`` times the host time inside each check directly (the check's own wrapper, timed) and the read at each
cell's end, in the same cells with the checks on (with ``--fresh``, a new batch tensor every step there too).

``--warm`` times the two checked calls alone in a tight loop inside one real cell (``F.embedding`` and
``F.cross_entropy`` on tiny tensors, ``--loop`` iterations), the checks off and on in alternate cells: what a
check costs when its code and data stay in the caches, the floor under the figures above.

``--compiled`` times a ``torch.compile``'d training step (``--backend``, default ``aot_eager``) with the checks on and
off: the step time ratio, and the graph breaks and graphs Dynamo reports for each
(``torch._dynamo.utils.counters``). Switching the checks on drops compiled code (it must recompile with the checks),
so the states alternate in blocks, each recompiled and warmed untimed before it is timed.

    PYTHONPATH=. python benchmarks/bench_guard_shell.py [--rounds 15] [--sizes tiny,issue,medium,large]
        [--cells 1,4,32] [--fresh] [--device cpu|cuda] [--probe] [--warm [--loop 100]]
        [--compiled [--backend aot_eager|inductor]] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

# name: (vocabulary, width, batch, sequence, classes)
SIZES = {
    "tiny": (1000, 32, 16, 32, 10),
    "issue": (1000, 128, 64, 32, 10),
    "medium": (1000, 256, 64, 32, 1000),
    "large": (4000, 512, 64, 64, 1000),
}

SETUP = """\
import torch
import torch.nn.functional as F
torch.manual_seed(0)
DEV = {device!r}
emb = torch.nn.Embedding({vocab}, {width}).to(DEV)
head = torch.nn.Linear({width}, {classes}).to(DEV)
opt = torch.optim.AdamW([*emb.parameters(), *head.parameters()], lr=1e-3)
x = torch.randint(0, {vocab}, ({batch}, {sequence}))
y = torch.randint(0, {classes}, ({batch},))
xs, ys = x.to(DEV), y.to(DEV)
"""

CELL = """\
for _ in range({steps}):
    xb, yb = {batch}
    loss = F.cross_entropy(head(emb(xb).mean(1)), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

SAME, FRESH = "xs, ys", "x.clone(), y.clone()"  # the same batch every step, or a new tensor every step (a loader's)
FRESH_COPIED = "x.clone().to(DEV), y.clone().to(DEV)"  # on a GPU: a new host batch copied to it, as a loader's is

COMPILED_SETUP = """\
def train_step():
    loss = F.cross_entropy(head(emb(xs).mean(1)), ys)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss
compiled_step = torch.compile(train_step, backend={backend!r})
"""

COMPILED_CELL = """\
for _ in range({steps}):
    compiled_step()
"""


def _setup(size: str, device: str) -> str:
    vocab, width, batch, sequence, classes = SIZES[size]
    return SETUP.format(vocab=vocab, width=width, batch=batch, sequence=sequence, classes=classes, device=device)


def make_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nb_cudaguard")
    return shell


def _run(shell, source: str) -> None:
    result = shell.run_cell(source, store_history=True)
    if not result.success:
        raise RuntimeError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")


def _switch(shell, on: bool) -> None:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        shell.run_line_magic("cudaguard", "check on" if on else "check off")


def _checked_calls() -> tuple[int, int]:
    """The fast mode's own counts since the process started: checked calls (deferred, reused or read at once), and
    of those the ones answered by an earlier check of the same unchanged tensor (``fast.known``)."""
    from nb_cudaguard.check.fast.board import BOARD

    try:
        from nb_cudaguard.check.fast.known import KNOWN
    except ImportError:  # a checkout from before fast.known, for a before/after run
        return BOARD.checks, 0
    try:
        from nb_cudaguard.check.fast.readable import READS
    except ImportError:  # a checkout from before fast.readable
        return BOARD.checks + KNOWN.skipped, KNOWN.skipped
    again = getattr(READS, "again", 0)  # a checkout from before the direct reads were remembered: none
    return BOARD.checks + KNOWN.skipped + READS.valid + again, KNOWN.skipped + again


def _timed(shell, source: str) -> tuple[float, float, int, int]:
    """The cell through ``run_cell``: its wall time, its thread's CPU time (what other processes on a shared
    machine disturb least: waiting for a core is not counted), the checked calls it made and how many of those
    reused an earlier verdict (the fast mode's own counts)."""
    gc.collect()
    calls, reused = _checked_calls()
    start, cpu = time.perf_counter(), time.thread_time()
    _run(shell, source)
    wall, used = time.perf_counter() - start, time.thread_time() - cpu
    calls_after, reused_after = _checked_calls()
    return wall, used, calls_after - calls, reused_after - reused


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 4:
        m = statistics.median(values)
        return m, min(values), max(values)
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q2, q1, q3


def _summary(off: list[float], on: list[float], checks: list[int], steps: int) -> dict:
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    per_check = [(b - a) / c * 1e6 for a, b, c in zip(off, on, checks, strict=True) if c]
    ratio, r1, r3 = _quartiles(ratios)
    cost, c1, c3 = _quartiles(per_check) if per_check else (float("nan"),) * 3
    return {
        "off_ms_per_step": 1000 * statistics.median(off) / steps,
        "on_ms_per_step": 1000 * statistics.median(on) / steps,
        "ratio": ratio,
        "ratio_q1": r1,
        "ratio_q3": r3,
        "us_per_check": cost,
        "us_per_check_q1": c1,
        "us_per_check_q3": c3,
    }


def run_eager(
    shell, sizes: list[str], cells: list[int], rounds: int, tensors: str = SAME, device: str = "cpu"
) -> list[dict]:
    rows = []
    for name in sizes:
        _switch(shell, False)
        _run(shell, _setup(name, device))
        for on in (False, True, False, True):  # warm both states
            _switch(shell, on)
            _run(shell, CELL.format(steps=4, batch=tensors))
        wall: dict[tuple[bool, int], list[float]] = {(on, n): [] for on in (False, True) for n in cells}
        cpu: dict[tuple[bool, int], list[float]] = {(on, n): [] for on in (False, True) for n in cells}
        checks: dict[int, list[int]] = {n: [] for n in cells}
        reused: dict[int, list[int]] = {n: [] for n in cells}
        for i in range(rounds):
            for on in (False, True) if i % 2 == 0 else (True, False):
                _switch(shell, on)
                _run(shell, CELL.format(steps=1, batch=tensors))  # untimed: the first cell after switching
                for n in cells:
                    elapsed, used, count, known = _timed(shell, CELL.format(steps=n, batch=tensors))
                    wall[on, n].append(elapsed)
                    cpu[on, n].append(used)
                    if on:
                        checks[n].append(count)
                        reused[n].append(known)
        _switch(shell, False)
        for n in cells:
            row = {"size": name, "steps": n, "rounds": rounds, "checks_per_cell": statistics.median(checks[n])}
            row["reused_per_cell"] = statistics.median(reused[n])
            row["wall"] = _summary(wall[False, n], wall[True, n], checks[n], n)
            row["cpu"] = _summary(cpu[False, n], cpu[True, n], checks[n], n)
            rows.append(row)
    return rows


def run_probe(shell, size: str, steps: int, cells: int, tensors: str = SAME, device: str = "cpu") -> dict:
    """The host time inside each check, measured directly in the real step: every checked entry point's check is
    timed (``time.perf_counter_ns`` around it, in a copy of the fast mode's own wrapper), and so is the read of the
    boards at each cell's end. Less disturbed by other processes than a difference of two cells' times."""
    from nb_cudaguard.check.fast import entries as fast_entries
    from nb_cudaguard.check.fast import mode as fast_mode

    _switch(shell, False)
    _run(shell, _setup(size, device))
    spent: list[int] = []
    reads: list[int] = []
    original_checked, original_finish = fast_entries._checked, fast_mode.FastChecker.finish

    def timed_checked(entry, original):
        check = entry.check

        def timed(label, args, kwargs):
            start = time.perf_counter_ns()
            try:
                return check(label, args, kwargs)
            finally:
                spent.append(time.perf_counter_ns() - start)

        return original_checked(fast_entries.Entry(entry.owner, entry.name, entry.label, timed), original)

    def timed_finish(self, source=None):
        start = time.perf_counter_ns()
        try:
            return original_finish(self, source)
        finally:
            reads.append(time.perf_counter_ns() - start)

    fast_entries._checked, fast_mode.FastChecker.finish = timed_checked, timed_finish
    try:
        _switch(shell, True)
        _run(shell, CELL.format(steps=steps, batch=tensors))
        spent.clear()
        reads.clear()
        for _ in range(cells):
            _run(shell, CELL.format(steps=steps, batch=tensors))
    finally:
        _switch(shell, False)
        fast_entries._checked, fast_mode.FastChecker.finish = original_checked, original_finish
    median, q1, q3 = _quartiles([t / 1000 for t in spent])
    return {
        "size": size,
        "steps": steps,
        "checks": len(spent),
        "us_per_check": median,
        "us_per_check_q1": q1,
        "us_per_check_q3": q3,
        "us_per_check_mean": statistics.mean(spent) / 1000,
        "us_per_cell_end": statistics.median(reads) / 1000,
    }


WARM_SETUP = """
import time, torch, torch.nn.functional as F
_w = torch.randn(100, 8); _ids = torch.randint(0, 100, (4, 8))
_logits = torch.randn(16, 10); _y = torch.randint(0, 10, (16,))
"""
WARM_CELL = """
_start = time.thread_time()
for _ in range({loop}):
    F.embedding({ids}, _w); F.cross_entropy(_logits, {y})
_took = time.thread_time() - _start
"""


def run_warm(shell, rounds: int, loop: int, fresh: bool = False) -> dict:
    """The checked calls in a tight loop, timed inside the cell (the cell's own per-run work is not in it); the
    checks off and on in turn, the order alternating every round. ``loop`` below 128 keeps every check held
    until the cell's end (no fold mid-cell), as in a cell of a few training steps. ``fresh``: a new tensor for
    each call (``clone()``, in both states), so that no check finds an earlier one of the same tensor."""
    _run(shell, WARM_SETUP)
    ids, y = ("_ids.clone()", "_y.clone()") if fresh else ("_ids", "_y")
    cell = WARM_CELL.format(loop=loop, ids=ids, y=y)
    took: dict[bool, list[float]] = {False: [], True: []}
    checks = []
    for index in range(rounds):
        for on in (False, True) if index % 2 == 0 else (True, False):
            _switch(shell, on)
            _run(shell, cell)  # untimed: the first run after switching refills CPython's caches
            before = _checked_calls()[0]
            _run(shell, cell)
            took[on].append(shell.user_ns["_took"])
            if on:
                checks.append(_checked_calls()[0] - before)
    _switch(shell, False)
    added = sorted((b - a) / c * 1e6 for a, b, c in zip(took[False], took[True], checks, strict=True))
    median, q1, q3 = _quartiles(added)
    calls = 2 * loop
    return {
        "checks_per_cell": statistics.median(checks),
        "off_us_per_call": 1e6 * statistics.median(took[False]) / calls,
        "on_us_per_call": 1e6 * statistics.median(took[True]) / calls,
        "us_per_check": median,
        "us_per_check_q1": q1,
        "us_per_check_q3": q3,
        "us_per_check_min": added[0],
    }


def run_compiled(shell, size: str, backend: str, blocks: int, steps: int, device: str = "cpu") -> dict:
    import torch
    from torch._dynamo.utils import counters

    _switch(shell, False)
    _run(shell, _setup(size, device))
    _run(shell, COMPILED_SETUP.format(backend=backend))
    times: dict[bool, list[float]] = {False: [], True: []}
    breaks: dict[bool, int] = {}
    graphs: dict[bool, int] = {}
    compile_s: dict[bool, float] = {}
    for i in range(blocks):
        for on in (False, True) if i % 2 == 0 else (True, False):
            _switch(shell, on)
            if i == 0:
                torch._dynamo.reset()
                counters.clear()
            start = time.perf_counter()
            _run(shell, COMPILED_CELL.format(steps=3))  # (re)compiles, untimed
            if i == 0:
                compile_s[on] = time.perf_counter() - start
                breaks[on] = sum(counters["graph_break"].values())
                graphs[on] = counters["stats"]["unique_graphs"]
            for _ in range(5):
                _elapsed, used, _count, _known = _timed(shell, COMPILED_CELL.format(steps=steps))
                times[on].append(used / steps)
    _switch(shell, False)
    _run(shell, "del compiled_step, train_step")
    torch._dynamo.reset()
    off, on_ = statistics.median(times[False]), statistics.median(times[True])  # thread CPU time per step
    return {
        "size": size,
        "backend": backend,
        "off_ms_per_step": 1000 * off,
        "on_ms_per_step": 1000 * on_,
        "ratio": on_ / off,
        "graph_breaks_off": breaks[False],
        "graph_breaks_on": breaks[True],
        "graphs_off": graphs[False],
        "graphs_on": graphs[True],
        "first_compile_s_off": compile_s[False],
        "first_compile_s_on": compile_s[True],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--cells", default="1,4,32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compiled", action="store_true", help="time a torch.compile'd step instead")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--probe", action="store_true", help="time each check directly instead")
    parser.add_argument("--warm", action="store_true", help="time the checked calls alone, in a tight loop")
    parser.add_argument("--loop", type=int, default=100)
    parser.add_argument("--fresh", action="store_true", help="a new batch tensor every step (clone), in both states")
    parser.add_argument("--device", default="cpu", help="where the model and the batches are: cpu, or cuda")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    shell = make_shell()
    sizes = args.sizes.split(",")
    tensors = (FRESH if args.device == "cpu" else FRESH_COPIED) if args.fresh else SAME
    if args.probe:
        cells = [int(c) for c in args.cells.split(",")]
        found = [run_probe(shell, size, n, 20, tensors, args.device) for size in sizes for n in cells]
        if args.json:
            print(json.dumps(found, indent=2))
            return 0
        print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} thread(s): host time in each check")
        for r in found:
            print(
                f"{r['size']:7} {r['steps']:3} steps: {r['checks']:5} checks, median {r['us_per_check']:6.1f} us "
                f"[{r['us_per_check_q1']:.1f}, {r['us_per_check_q3']:.1f}], mean {r['us_per_check_mean']:6.1f} us; "
                f"read at the cell's end {r['us_per_cell_end']:6.1f} us"
            )
        return 0
    if args.warm:
        warm = run_warm(shell, args.rounds, args.loop, args.fresh)
        if args.json:
            print(json.dumps(warm, indent=2))
            return 0
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), warm loop of {args.loop}, "
            f"{args.rounds} interleaved rounds: {warm['checks_per_cell']:.0f} checks a cell; a call off "
            f"{warm['off_us_per_call']:.1f} us, on {warm['on_us_per_call']:.1f} us; added per check: median "
            f"{warm['us_per_check']:.1f} us [{warm['us_per_check_q1']:.1f}, {warm['us_per_check_q3']:.1f}], "
            f"min {warm['us_per_check_min']:.1f} us"
        )
        return 0
    if args.compiled:
        rows = [run_compiled(shell, size, args.backend, blocks=4, steps=16, device=args.device) for size in sizes]
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), compiled ({args.backend})")
        for r in rows:
            print(
                f"{r['size']:7} off {r['off_ms_per_step']:8.3f} ms  on {r['on_ms_per_step']:8.3f} ms  "
                f"x{r['ratio']:.3f}  graph breaks off/on {r['graph_breaks_off']}/{r['graph_breaks_on']}  "
                f"graphs off/on {r['graphs_off']}/{r['graphs_on']}  "
                f"first compile off/on {r['first_compile_s_off']:.1f}/{r['first_compile_s_on']:.1f} s"
            )
        return 0
    rows = run_eager(shell, sizes, [int(n) for n in args.cells.split(",")], args.rounds, tensors, args.device)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} thread(s), {args.rounds} interleaved "
        f"rounds, medians, "
        f"{'a new batch tensor' if args.fresh else 'the same batch tensors'} every step"
    )
    print("cpu: the cell's thread CPU time; wall: its wall time; [q1, q3]: quartiles of the per-round figures")
    print(
        f"{'size':7} {'steps':>5} {'checks':>6} {'reused':>6} {'off ms/step':>11} {'cpu on/off [q1, q3]':>24} "
        f"{'cpu us/check [q1, q3]':>26} {'wall on/off [q1, q3]':>24} {'wall us/check':>14}"
    )
    for r in rows:
        c, w = r["cpu"], r["wall"]
        print(
            f"{r['size']:7} {r['steps']:5} {r['checks_per_cell']:6.0f} {r['reused_per_cell']:6.0f} "
            f"{c['off_ms_per_step']:11.3f} "
            f"{c['ratio']:7.3f} [{c['ratio_q1']:.3f}, {c['ratio_q3']:.3f}] "
            f"{c['us_per_check']:8.1f} [{c['us_per_check_q1']:6.1f}, {c['us_per_check_q3']:6.1f}] "
            f"{w['ratio']:7.3f} [{w['ratio_q1']:.3f}, {w['ratio_q3']:.3f}] {w['us_per_check']:14.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
