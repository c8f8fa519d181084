"""``nb-cudaguard run``: execute a whole notebook headless (Kaggle's "Save & Run All", CI) with the extension loaded.

A device-side assert in a batch run today ends with a useless log. Here every failing cell gets the extension's
report in its own output (readable in static viewers), the run writes Markdown/JSON reports of every incident, and
the executed notebook is written even when the run stops half-way.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nb_cudaguard.errors import NbCudaguardError

EXIT_OK, EXIT_CELL_FAILED, EXIT_INVALID = 0, 1, 2
# the report of the cell that just failed, or None: an error that is no incident (a typo) gets no report
_REPORT_EXPR = (
    "(lambda g: g.last_report.to_json() if g.last_report is not None and g.journal.last is not None"
    " and g.last_report.incident.cell is g.journal.last else None)(__import__('nb_cudaguard').get_guard())"
)
# After "restart, replay and diagnose": the report the values read under %%cudacheck pinned, or None
_PINNED_EXPR = (
    "(lambda r: r.to_json() if r is not None and r.pinned else None)"
    "(__import__('nb_cudaguard').get_guard().last_report)"
)
# Runs in the restarted process once its replay is done (requests sent during a restart wait for it).
_REPLAY_EXPR = (
    "__import__('json').dumps((lambda r: {'summary': r.summary(), 'text': r.to_text(), 'how': r.how, 'pid': r.pid,"
    " 'replayed': [c.label for c, _ in r.ran], 'seconds': r.seconds, 'failed': r.failed.label if r.failed else None,"
    " 'error': r.error, 'diagnosis': r.diagnosis})(__import__('nb_cudaguard').get_guard().last_replay))"
)


class InvalidNotebook(NbCudaguardError):
    """The notebook or the arguments cannot be run at all (exit code 2)."""


@dataclass
class CellRun:
    index: int
    execution_count: int | None
    first_line: str
    status: str  # ok | error | timeout | dead_kernel | skipped
    seconds: float
    error: str | None = None


@dataclass
class RunOutcome:
    notebook: str
    output: str
    exit_code: int
    message: str
    cells: list[CellRun] = field(default_factory=list)
    incidents: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    code_cells: int = 0  # the notebook's code cells: those after the one the run stopped at never ran

    def to_dict(self) -> dict:
        return asdict(self)

    def cell_counts(self) -> str:
        """What became of every code cell, the counts adding up to the notebook's: ``4 ok, 1 failed, 3 never ran
        (the run stopped at cell 6) of 8``."""
        counts = [(sum(c.status == "ok" for c in self.cells), "ok")]
        counts.append((sum(c.status in ("error", "timeout", "dead_kernel") for c in self.cells), "failed"))
        counts.append((sum(c.status == "skipped" for c in self.cells), "skipped after a restart"))
        never = max(self.code_cells - len(self.cells), 0)
        stopped = f" (the run stopped at cell {self.cells[-1].index})" if never and self.cells else ""
        counts.append((never, f"never ran{stopped}"))
        shown = [f"{n} {what}" for n, what in counts if n or what == "ok"]
        return ", ".join(shown) + f" of {max(self.code_cells, len(self.cells))}"

    def to_markdown(self) -> str:
        lines = [
            f"# nb-cudaguard run: {Path(self.notebook).name}",
            "",
            f"- result: **{self.message}** (exit code {self.exit_code})",
            f"- cells: {self.cell_counts()}, {self.seconds:.1f} s in all",
            f"- executed notebook: `{self.output}`",
            "",
        ]
        for number, incident in enumerate(self.incidents, 1):
            lines += [f"## Incident {number}: cell {incident['cell']} ({incident['classification']})", ""]
            lines += ["```", incident["error"], "```", ""]
            replay = incident.get("replay")
            if replay:
                lines += [f"- restarted and replayed: {replay.get('summary', replay.get('error'))}", ""]
                if replay.get("diagnosis"):
                    lines += ["Diagnosis under %%cudacheck:", "", "```", replay["diagnosis"], "```", ""]
            for rank, cause in enumerate(incident.get("causes", [])[:3], 1):
                who = f" (in `{cause['variable']}`)" if cause.get("variable") else ""
                tag = f"<sub>{cause['confidence']:.0%} · {cause['family']}</sub>"  # the family id: a grey tag only
                lines.append(f"{rank}. {cause['summary']}{who} {tag}")
                lines.append(f"   - fix: {cause['fix']}")
            lines.append("")
        lines += ["## Cells", "", "| cell | status | seconds | first line |", "|---|---|---|---|"]
        for cell in self.cells:
            lines.append(f"| {cell.index} | {cell.status} | {cell.seconds:.2f} | `{cell.first_line[:60]}` |")
        return "\n".join(lines) + "\n"


class Progress:
    """tqdm's bar where tqdm is installed and the stream is a terminal (as tqdm decides, ``disable=None``); one
    plain line per cell elsewhere (CI logs, pipes, no tqdm). tqdm is optional: ``pip install nb_cudaguard[progress]``.
    """

    def __init__(self, total: int, stream=None) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.done = 0
        self.bar = _bar(total, self.stream)

    def start(self, index: int, first_line: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"cell {index}: {first_line[:40]}")

    def finish(self, cell: CellRun) -> None:
        self.done += 1
        if self.bar is None:
            self._line(f"cell {cell.index} ({self.done}/{self.total}): {cell.status} {cell.seconds:.2f} s")
            return
        if cell.status != "ok":
            self.bar.write(f"cell {cell.index}: {cell.status}: {cell.error or ''}", file=self.stream)
        self.bar.update(1)

    def note(self, text: str) -> None:
        if self.bar is None:
            self._line(text)
        else:
            self.bar.write(text, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _bar(total: int, stream) -> Any:
    """A tqdm bar on ``stream``, or None without tqdm or when tqdm finds that ``stream`` is no terminal."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    bar = tqdm(total=total, file=stream, disable=None, unit="cell", desc="nb-cudaguard run", dynamic_ncols=True)
    return None if bar.disable else bar


def load_notebook(path: str, kernel: str | None):
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise InvalidNotebook(f"no such notebook: {path}") from None
    except Exception as exc:  # nbformat raises whatever a malformed structure makes its converters raise
        raise InvalidNotebook(f"{path} is not a readable notebook ({type(exc).__name__}: {exc})") from None
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise InvalidNotebook(f"{path} is not a valid notebook: {exc.message}") from None
    kernel_name = kernel or nb.metadata.get("kernelspec", {}).get("name")
    if not kernel_name:
        raise InvalidNotebook(f"{path} names no kernel (metadata.kernelspec is missing); pass --kernel python3")
    return nb, kernel_name


def _first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


def _error_of(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            evalue = str(output.get("evalue") or "")
            return f"{output.get('ename')}: {evalue.splitlines()[0] if evalue else ''}"
    return None


class NotebookRunner:
    def __init__(
        self,
        path: str,
        *,
        output: str | None = None,
        on_poison: str = "stop",
        timeout: float | None = None,
        kernel: str | None = None,
        progress_stream=None,
    ) -> None:
        self.path = path
        self.output = output or str(Path(path).with_suffix("")) + ".executed.ipynb"
        self.on_poison = on_poison
        self.timeout = timeout
        self.kernel = kernel
        self.progress_stream = progress_stream
        self.replay_timeout = 600.0  # seconds to wait for the replay's answer when the plan's time is unknown

    def run(self) -> RunOutcome:
        nb, kernel_name = load_notebook(self.path, self.kernel)
        outcome = RunOutcome(self.path, self.output, EXIT_OK, "all cells ran")
        started = time.perf_counter()
        try:
            self._execute(nb, kernel_name, outcome)
        finally:
            outcome.seconds = time.perf_counter() - started
            self._write(nb)
        return outcome

    def _write(self, nb) -> None:
        import nbformat

        Path(self.output).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, self.output)

    def _execute(self, nb, kernel_name: str, outcome: RunOutcome) -> None:
        from nbclient import NotebookClient
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        client = NotebookClient(
            nb,
            timeout=None if self.timeout is None else max(1, math.ceil(self.timeout)),  # nbclient < 0.8 takes int
            kernel_name=kernel_name,
            allow_errors=True,
            resources={"metadata": {"path": str(Path(self.path).resolve().parent)}},
        )
        code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        outcome.code_cells = len(code_cells)
        progress = Progress(len(code_cells), self.progress_stream)
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        # The kernel's own fds go nowhere: everything it prints reaches the notebook through ipykernel already.
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
            self._silent(client, "%load_ext nb_cudaguard")
            for index, cell in code_cells:
                first = _first_line(cell.source)
                progress.start(index, first)
                began = time.perf_counter()
                status, error = "ok", None
                try:
                    client.execute_cell(cell, index)
                    error = _error_of(cell)
                    status = "error" if error else "ok"
                except CellTimeoutError:
                    status, error = "timeout", f"the cell ran longer than --timeout {self.timeout} s"
                except DeadKernelError:
                    status, error = "dead_kernel", "the kernel died while running this cell"
                record = CellRun(index, cell.get("execution_count"), first, status, time.perf_counter() - began, error)
                outcome.cells.append(record)
                progress.finish(record)
                if status == "ok":
                    continue
                if status == "error":
                    incident = self._incident(client, index, error)
                    outcome.incidents.append(incident)
                    if incident["classification"] == "poisoned":
                        progress.note(f"cell {index}: the CUDA context is poisoned; restarting in place and replaying")
                        incident["replay"] = self._recover(client, cell)
                        self._pinned(client, incident)
                        progress.note(f"cell {index}: {incident['replay'].get('summary') or incident['replay']}")
                        if self.on_poison == "skip" and not incident["replay"].get("failed"):
                            record.status = "skipped"
                            outcome.exit_code = EXIT_CELL_FAILED
                            outcome.message = f"cell {index} poisoned the context; restarted, replayed and skipped it"
                            continue
                    elif "raises-exception" in cell.metadata.get("tags", []):
                        continue
                outcome.exit_code = EXIT_CELL_FAILED
                outcome.message = f"cell {index} failed: {error}"
                break
        progress.close()

    def _silent(self, client, code: str, user_expressions: dict | None = None, timeout: float | None = 60) -> dict:
        from nbclient.util import run_sync

        reply = run_sync(client.kc.execute_interactive)(
            code,
            silent=True,
            store_history=False,
            user_expressions=user_expressions or {},
            timeout=timeout,
            output_hook=lambda msg: None,  # what our own requests print is not the user's output
        )
        return reply["content"]

    def _recover(self, client, cell) -> dict:
        """Restart the poisoned kernel in place, replay the minimal plan (and, with ``diagnose``, re-run the failing
        cell under %%cudacheck), and put what happened into the failing cell's output."""
        import nbformat

        diagnose = self.on_poison == "diagnose"
        started = time.perf_counter()
        asked = self._silent(
            client,
            f"_nb_cudaguard_plan = __import__('nb_cudaguard').restart(replay='minimal', diagnose={diagnose})",
            {"seconds": "_nb_cudaguard_plan.recorded_seconds"},
        )
        if asked.get("status") != "ok":
            return {"failed": "restart", "error": f"{asked.get('ename')}: {asked.get('evalue')}"}
        recorded = asked.get("user_expressions", {}).get("seconds", {}).get("data", {}).get("text/plain", "0")
        # The replay takes about as long as the cells did; a failing cell under %%cudacheck too.
        wait = 60.0 + 3 * float(recorded) if recorded.replace(".", "", 1).isdigit() else self.replay_timeout
        content = self._after_restart(client, wait)
        found = content.get("user_expressions", {}).get("replay", {})
        if found.get("status") != "ok":
            return {"failed": "restart", "error": f"{found.get('ename')}: {found.get('evalue')}"}
        replay = json.loads(ast.literal_eval(found["data"]["text/plain"]))
        replay["seconds_to_ready"] = time.perf_counter() - started
        text = replay["text"]
        cell.outputs.append(
            nbformat.v4.new_output(
                "display_data",
                data={"text/plain": text, "text/markdown": "**nb-cudaguard run**\n\n```\n" + text + "\n```\n"},
            )
        )
        return replay

    def _after_restart(self, client, wait: float, attempts: int = 4) -> dict:
        """Ask the restarted kernel how the replay went. The question is idempotent, so if it is lost in the
        exec window (see docs/restart.md) it is asked again rather than waited on for ever."""
        for attempt in range(attempts):
            try:
                return self._silent(client, "", {"replay": _REPLAY_EXPR}, timeout=wait)
            except TimeoutError:
                if attempt == attempts - 1:
                    raise
        return {}

    def _pinned(self, client, incident: dict) -> None:
        """The values read under %%cudacheck replace the ranking made before the restart: the run's report says
        what was read, not what was guessed while the device could not be read."""
        if incident["replay"].get("failed") or not incident["replay"].get("diagnosis"):
            return
        content = self._silent(client, "", {"report": _PINNED_EXPR})
        found = content.get("user_expressions", {}).get("report", {})
        said = ast.literal_eval(found["data"]["text/plain"]) if found.get("status") == "ok" else None
        if said is not None:
            report = json.loads(said)
            incident.update(causes=report["causes"], notes=report.get("notes", []), pinned=report["pinned"])

    def _incident(self, client, index: int, error: str | None) -> dict:
        content = self._silent(client, "", {"report": _REPORT_EXPR})
        found = content.get("user_expressions", {}).get("report", {})
        incident = {"cell": index, "error": error or "", "classification": "unknown", "causes": []}
        said = ast.literal_eval(found["data"]["text/plain"]) if found.get("status") == "ok" else None  # a str's repr
        if found.get("status") == "ok" and said is None:
            incident["classification"] = "not_cuda"  # left to IPython: not an incident of ours
        elif said is not None:
            report = json.loads(said)
            incident.update(
                classification=report["classification"],
                causes=report["causes"],
                assertions=report["assertions"],
                notes=report.get("notes", []),
            )
        return incident
