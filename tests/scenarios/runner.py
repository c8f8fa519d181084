"""Run a scenario in a real IPython shell with the extension loaded, on CPU or through the simulated GPU.

A scenario is a small script whose cells are separated by ``# %%`` and whose header says what the diagnosis must
find (``# family:`` and ``# variable:``). Every cell runs through ``shell.run_cell``, exactly as in a notebook:
the extension records the journal, captures fd 2, builds the Incident and diagnoses it in its own
``post_run_cell`` hook. Scenarios are written as for a GPU (``device = "cuda" if torch.cuda.is_available() else
"cpu"``, ``.to(device)``): the CPU form runs them on the CPU; the CUDA form turns on the simulated GPU of
``nb_cudaguard.testing``, where the tensors moved to the device cannot be read once a device assert has poisoned
it, so the diagnosis works from what survives, as on a real GPU.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
_HEADER = re.compile(r"^#\s*(family|variable):\s*(.+?)\s*$", re.MULTILINE)


@dataclass
class Scenario:
    path: Path
    family: str
    variable: str
    title: str
    cells: list[str]

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass
class Outcome:
    scenario: Scenario
    form: str  # "cpu" | "cuda"
    report: object  # nb_cudaguard.panel.report.Report, or None when no cell failed
    seconds: float
    panel: dict | None = None  # with run(panel=True): the panel's text, Markdown and HTML, as it showed them

    @property
    def causes(self) -> list:
        return self.report.diagnosis.causes if self.report is not None else []

    @property
    def rank(self) -> int | None:
        families = [c.family for c in self.causes]
        return families.index(self.scenario.family) + 1 if self.scenario.family in families else None

    @property
    def top(self):
        return self.causes[0] if self.causes else None

    @property
    def values(self) -> bool:
        """The top cause quotes the offending values (read from the tensor, a host copy or %%cudacheck)."""
        top = self.top
        return top is not None and any(e.values for e in top.evidence if e.kind in ("tensor", "guard"))

    @property
    def pinned(self) -> bool:
        """Right family and variable, with the offending values and their positions."""
        top = self.top
        return self.named and any(e.values and e.positions for e in top.evidence if e.kind in ("tensor", "guard"))

    @property
    def named(self) -> bool:
        top = self.top
        return top is not None and top.family == self.scenario.family and top.variable == self.scenario.variable


def load(path: Path) -> Scenario:
    text = path.read_text()
    fields = dict(_HEADER.findall(text))
    description = next((line[1:].strip() for line in text.splitlines()[2:4] if line.startswith("#")), "")
    cells = [cell.strip("\n") for cell in re.split(r"^# %%.*$", text, flags=re.MULTILINE)]
    return Scenario(path, fields["family"], fields["variable"], description, [c for c in cells if c.strip()])


def all_scenarios() -> list[Scenario]:
    return [load(p) for p in sorted(HERE.glob("s[0-9]*.py"))]


def gpu_style_scenarios() -> list[Scenario]:
    """Issue 31's notebook cases (``g*.py``): written as users write them (the loops, pandas and loaders of
    /work/shared/idioms.md), not to the rules, and scored on the simulated GPU only, before and after a restart."""
    return [load(p) for p in sorted(HERE.glob("g[0-9]*.py"))]


def shell():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


def run(
    scenario: Scenario, form: str = "cpu", quiet: bool = True, check_last: bool = False, panel: bool = False
) -> Outcome:
    """``form``: "cpu" (no GPU) or "cuda" (the simulated GPU). ``check_last``: run the failing cell under
    ``%%cudacheck``, as "Restart, replay & diagnose" does in the restarted process after replaying the others.
    ``panel``: also render the report as the panel does, tensors included, while the simulated GPU is still on."""
    import nb_cudaguard
    from nb_cudaguard import testing
    from nb_cudaguard.panel.report import text_bundle
    from nb_cudaguard.panel.widget import gather

    ip = shell()
    nb_cudaguard.unload_ipython_extension(ip)
    ip.reset(new_session=False)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    nb_cudaguard.load_ipython_extension(ip)
    guard = nb_cudaguard.get_guard(ip)
    guard.show_report = "never" if quiet else "auto"
    started = time.perf_counter()
    shown = None
    devnull = open(os.devnull, "w")
    saved = sys.stdout, sys.stderr
    try:
        if quiet:
            sys.stdout = sys.stderr = devnull
        if form == "cuda":
            testing.enable()
        for index, cell in enumerate(scenario.cells):
            last = index == len(scenario.cells) - 1
            result = ip.run_cell("%%cudacheck\n" + cell if check_last and last else cell, store_history=True)
            if result.error_in_exec is not None:
                break
        shown = text_bundle(gather(guard.last_report).content()) if panel and guard.last_report else None
    finally:
        testing.reset()
        sys.stdout, sys.stderr = saved
        devnull.close()
    report = guard.last_report
    nb_cudaguard.unload_ipython_extension(ip)
    return Outcome(scenario, form, report, time.perf_counter() - started, shown)
