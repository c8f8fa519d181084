"""What a restart would replay, on real notebooks: cells and recorded seconds of the plan, before and after a change.

Each notebook (the example notebooks, and the session notebooks of ``tests/sessions`` where their libraries are
installed) runs in a fresh IPython shell of its own process with the simulated GPU, up to its failing cell; then the
restart's plan is built as ``%cudaguard restart`` builds it, without restarting: the minimal replay plan, the cells
the snapshot restores instead of replaying, and the carry plan's expected time to ready. Run it on two checkouts
(``PYTHONPATH=<checkout>``) to compare.

    PYTHONPATH=$PWD python benchmarks/bench_plans.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def notebooks() -> dict[str, list[str]]:
    """name -> the code cells up to and including the failing one."""
    import nbformat

    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "example_notebooks").glob("*.ipynb")):
        cells = []
        for cell in nbformat.read(path, 4).cells:
            if cell.cell_type != "code" or cell.source.startswith("%load_ext"):
                continue
            cells.append(cell.source)
            if "expected-failure" in cell.metadata.get("tags", []) or "raises-exception" in cell.metadata.get(
                "tags", []
            ):
                break
        found[path.stem] = cells
    sessions = ROOT / "tests" / "sessions"
    if (sessions / "session_notebooks.py").exists():
        sys.path.insert(0, str(sessions))
        import importlib.util

        from session_notebooks import NOTEBOOKS  # type: ignore[import-not-found]

        for notebook in NOTEBOOKS:
            if all(importlib.util.find_spec(library) for library in notebook.needs):
                found[notebook.name] = [*notebook.setup, notebook.train, notebook.bug]
    return found


def measure(cells: list[str]) -> dict:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import nb_cudaguard
    from nb_cudaguard.carry.files import plan_for
    from nb_cudaguard.replay.plan import build_plan
    from nb_cudaguard.snapshot.plan import snapshot_rows

    shell = InteractiveShell.instance()
    with capture_output():
        shell.run_cell("%load_ext nb_cudaguard", store_history=True)
        shell.run_cell("%cudaguard simulate on", store_history=True)
        failed = None
        for source in cells:
            result = shell.run_cell(source, store_history=True)
            if result.error_in_exec is not None or result.error_before_exec is not None:
                failed = type(result.error_in_exec or result.error_before_exec).__name__
                break
    guard = nb_cudaguard.get_guard(shell)
    begun = time.perf_counter()
    plan = build_plan(guard.journal, "minimal")
    restored = set(snapshot_rows(plan, guard.journal, guard.snapshots))
    carry = plan_for(shell, guard, plan)
    planned = time.perf_counter() - begun
    replayed = [step.record for step in carry.steps if step.action == "replay" and step.record.seq not in restored]
    return {
        "failed": failed,
        "minimal": [len(plan.steps), round(plan.recorded_seconds, 3)],
        "snapshot restores": len(restored),
        "replayed": [len(replayed), round(sum(r.duration for r in replayed), 3)],
        "carry ready (s)": round(carry.expected_seconds, 3),
        "planning (s)": round(planned, 3),
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(notebooks()[sys.argv[2]])))
        return
    print("notebook | failed with | minimal plan: cells, s | cells the snapshot restores | replayed: cells, s")
    for name in notebooks():
        done = subprocess.run(
            [sys.executable, __file__, "--one", name], capture_output=True, text=True, env=os.environ, timeout=600
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            print(f"{name} | could not run: {(done.stderr.strip().splitlines() or ['?'])[-1][:100]}")
            continue
        row = json.loads(lines[-1])
        minimal, replayed = row["minimal"], row["replayed"]
        print(
            f"{name} | {row['failed']} | {minimal[0]}, {minimal[1]:.2f} | {row['snapshot restores']} | "
            f"{replayed[0]}, {replayed[1]:.2f}"
        )


if __name__ == "__main__":
    main()
