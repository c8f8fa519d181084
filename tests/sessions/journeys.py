"""The journeys every session notebook is driven through, in a real kernel with the simulated GPU, and the
invariants checked after every step.

A step is one cell, run as the user runs it; `Session.step` checks what holds after any step (no internal error of
nb_cudaguard, no report for an error that is not CUDA's, no more than the first three of the device's assertion
lines in the cell's output) and each journey checks the rest where it applies: the
right family and variable, every name back after a restart, the weights and the optimizers' state equal to what
they were before the failure, and nothing trained again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernel_helpers import run_ok, value
from session_notebooks import Notebook

from nb_cudaguard.cli.kernelsession import CellResult, KernelSession
from nb_cudaguard.record.assertions import is_assertion_line

# The hash of every model, optimizer and LR scheduler in the namespace (and of a Trainer's own), and of the plain
# Python values among `names` (a loss history), read while the context is healthy. Never replayed: after a restart
# it is run again by hand.
DIGEST = """# cudaguard: skip
def _cudaguard_digest(names=()):
    import hashlib

    import torch

    def tree(value):
        if torch.is_tensor(value):
            raw = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            return f"{hashlib.sha256(raw).hexdigest()[:16]} {value.dtype} {tuple(value.shape)}"
        if isinstance(value, dict):
            return {str(k): tree(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [tree(v) for v in value]
        return repr(value)

    stateful = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
    found = {}
    for name, obj in list(globals().items()):
        if name.startswith("_"):
            continue
        if isinstance(obj, stateful):
            found[name] = tree(obj.state_dict())
        if type(obj).__name__ == "Trainer":
            for part in ("optimizer", "lr_scheduler"):
                inner = getattr(obj, part, None)
                found[f"{name}.{part}"] = None if inner is None else tree(inner.state_dict())
            found[f"{name}.state.global_step"] = obj.state.global_step
    for name in names:
        obj = globals().get(name)
        if type(obj) in (list, tuple, dict, int, float, str, bool):
            found[f"value of {name}"] = hashlib.sha256(repr(obj).encode()).hexdigest()[:16] + f" ({len(repr(obj))})"
    return found
"""

USER_NAMES = "sorted(n for n in globals() if not n.startswith('_') and n not in ('In', 'Out', 'exit', 'quit'))"
HEALTHY = "(torch.ones(3, device=device) * 2).sum().item()"
POISONED = "__import__('nb_cudaguard.testing', fromlist=['is_poisoned']).is_poisoned()"
CUDA_ERRORS = ("AcceleratorError", "RuntimeError")
SHOWN_ASSERTION_LINES = 3  # CudaGuard.assertion_lines_shown's default

# An error nb_cudaguard handled itself and reported in a line of its own ("nb_cudaguard: could not build the report
# (KeyError: ...)"), or a traceback whose innermost frame is in the package, the simulated GPU excepted (it stands
# for torch's and CUDA's own code).
_INTERNAL_LINE = re.compile(r"nb_cudaguard: [^\n]*\(\w*(Error|Exception)\b[^\n]*\)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME_FILE = re.compile(r"File (\S+?\.py)[:\"]|File \"(\S+?\.py)\"")


def internal_errors(result: CellResult) -> list[str]:
    found = []
    texts = [o.get("text", "") for o in result.outputs] + [t for o in result.outputs for t in o.get("traceback", [])]
    texts += [text for o in result.outputs for text in o.get("data", {}).values() if isinstance(text, str)]
    for text in texts:
        found += [m.group(0) for m in _INTERNAL_LINE.finditer(_ANSI.sub("", text))]
    for output in result.outputs:
        frames = [
            next(p for p in m.groups() if p)
            for line in output.get("traceback", [])
            for m in _FRAME_FILE.finditer(_ANSI.sub("", line))
        ]
        if frames and "/nb_cudaguard/" in frames[-1] and "/nb_cudaguard/testing/" not in frames[-1]:
            found.append(f"{output.get('ename')} raised in {frames[-1]}")
    return found


def reported(result: CellResult) -> bool:
    """Whether nb_cudaguard said anything under the cell: its panel or report, or a line of its own."""
    shown = [o for o in result.outputs if o["output_type"] in ("display_data", "execute_result")]
    said = "nb_cudaguard" in result.stdout + result.stderr
    return bool(shown) or said


@dataclass
class Session:
    """One notebook in one kernel; `workdir` is the kernel's working directory (its ``train_log.txt``)."""

    kernel: KernelSession
    notebook: Notebook
    workdir: Path
    log: list[str] = field(default_factory=list)

    def step(self, code: str, *, ok: bool = True, timeout: float = 240) -> CellResult:
        result = self.kernel.run(code, timeout=timeout)
        self.log.append(f"{result.status}: {code.splitlines()[0][:70]}")
        assert result.status != "timeout", (self.log, code)
        assert not internal_errors(result), (code, internal_errors(result))
        # the device's own lines (one per failing thread on a GPU) fold after the first three of a cell
        shown = [line for line in result.stderr.splitlines() if is_assertion_line(line)]
        assert len(shown) <= SHOWN_ASSERTION_LINES, (code, shown)
        if ok:
            assert result.status == "ok", (code, result.error, result.stderr[-3000:])
        else:
            assert result.status == "error", (code, result.status)
        return result

    def setup_and_train(self) -> None:
        for cell in self.notebook.setup:
            self.step(cell)
        self.step(self.notebook.train)
        assert self.trainings() == 1
        status = self.step("%cudaguard status").stdout
        assert re.search(r"snapshot: [^\n]*\bmodel\b", status), status  # what "nothing trained again" relies on

    def trainings(self) -> int:
        path = self.workdir / "train_log.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def digest(self) -> dict:
        self.step(DIGEST)
        names = sorted(self.notebook.names_read_after_the_failure())
        found = value(self.kernel, f"_cudaguard_digest({names!r})")
        assert found, "the digest found no model"
        return found

    def report(self) -> dict:
        said = run_ok(self.kernel, "%cudaguard report --json").stdout
        assert "{" in said, said
        return json.loads(said[said.index("{") :])

    def no_report_yet(self) -> None:
        said = run_ok(self.kernel, "%cudaguard report --json").stdout
        assert "no failing cell recorded yet" in said, said[:500]

    def fails_with_cuda_error(self, code: str) -> CellResult:
        result = self.step(code, ok=False)
        assert result.error["ename"] in CUDA_ERRORS, result.error
        assert "device-side assert triggered" in result.error["evalue"], result.error
        return result

    def not_cuda(self, code: str, ename: str) -> None:
        """An error that is not CUDA's: IPython's alone, no report, and the last report stays what it was."""
        before = run_ok(self.kernel, "%cudaguard report --json").stdout
        result = self.step(code, ok=False)
        assert result.error["ename"] == ename, result.error
        assert not reported(result), (code, result.outputs)
        assert run_ok(self.kernel, "%cudaguard report --json").stdout == before, code

    def typo(self) -> None:
        """The user inspects a value and mistypes its name (a name that really does not exist)."""
        typo = self.notebook.typo
        assert value(self.kernel, f"{typo!r} in globals()") is False, typo
        self.not_cuda(f"print({typo})", "NameError")

    def failing_import(self) -> None:
        assert value(self.kernel, "__import__('importlib.util').util.find_spec('google') is None") is True
        self.not_cuda("from google.colab import drive\ndrive.mount('/content/drive')", "ModuleNotFoundError")

    def check_diagnosis(self, report: dict, *, poisoned: bool = True) -> None:
        top = report["causes"][0]
        assert top["family"] in self.notebook.families, [(c["family"], c["confidence"]) for c in report["causes"]]
        assert top["variable"] in self.notebook.variables, (top["family"], top["variable"])
        assert (report["classification"] == "poisoned") is poisoned, report["classification"]

    def names(self) -> list[str]:
        return value(self.kernel, USER_NAMES)

    def restart(self, options: str = "") -> str:
        said = self.step(f"%cudaguard restart {options}".strip(), timeout=240).stdout
        first = self.step("print('ready')", timeout=300)
        said += first.stdout
        # no replayed cell failed; a name that did not come back is said, and may only be one the restored
        # training cell alone left that cannot be carried (its loop's device tensors, an open file)
        assert "stopped at" not in first.stdout and "1 failure(s)" not in first.stdout, said
        lost = value(self.kernel, "__import__('nb_cudaguard').get_guard().last_replay.lost")
        assert not set(lost) & self.notebook.names_read_after_the_failure(), (lost, said)
        assert (("not rebuilt" in first.stdout) == bool(lost)) and ("0 failure(s)" in first.stdout) != bool(lost)
        assert value(self.kernel, POISONED) is False
        return said

    def check_state_back(self, names_before: list[str], digest_before: dict) -> None:
        """Every name the rest of the notebook reads is back, the trained state equals the state before the failure,
        and the training cell did not run again."""
        needed = sorted(self.notebook.names_read_after_the_failure() & set(names_before))
        missing = value(self.kernel, f"[n for n in {needed!r} if n not in globals()]")
        assert missing == [], f"names not back after the restart: {missing}"
        assert self.digest() == digest_before, "the trained state differs from the state before the failure"
        assert self.trainings() == 1, "the training cell ran again"

    def fix_and_continue(self) -> None:
        fixed = self.step(self.notebook.fix)
        assert not reported(fixed), fixed.outputs
        for cell in self.notebook.after:
            after = self.step(cell)
            assert not reported(after), after.outputs
        assert value(self.kernel, HEALTHY) == 6.0


def journey_restart(session: Session) -> None:
    """Fail, report, fail again (the sticky error), a typo, a failing import and a KeyError, restart, fix, continue."""
    session.setup_and_train()
    digest, names = session.digest(), session.names()

    failed = session.fails_with_cuda_error(session.notebook.bug)
    assert reported(failed), "no report under the failing cell"
    first = session.report()
    session.check_diagnosis(first)

    again = session.fails_with_cuda_error(session.notebook.bug)  # re-run, as users do: the sticky error
    assert "device-side assert" in again.error["evalue"]
    sticky = session.report()
    assert sticky["causes"][0]["family"] == first["causes"][0]["family"], "the sticky error's report"
    assert sticky["incident"]["cell"]["source"] == first["incident"]["cell"]["source"]

    session.typo()
    session.failing_import()
    session.not_cuda("hparams = {'lr': 1e-3}\nhparams['learning_rate']", "KeyError")

    plan = session.step("%cudaguard replay --dry-run").stdout
    assert "nothing to replay" not in plan and "with no replay" not in plan, plan
    session.restart()
    session.check_state_back(names, digest)
    after = session.report()
    assert after["restarted"] is True
    assert after["causes"][0]["family"] == first["causes"][0]["family"]
    session.fix_and_continue()
    assert session.trainings() == 1


def journey_diagnose(session: Session) -> None:
    """Errors that are not CUDA's once CUDA is initialised get no report; then fail, a typo, a failing import,
    ``restart --diagnose``, the pinned report, fix, continue."""
    session.setup_and_train()
    session.no_report_yet()
    session.typo()
    session.not_cuda("{'train': 1}['test']", "KeyError")
    session.not_cuda("torch.zeros(2, 3, device=device) @ torch.zeros(2, 3, device=device)", "RuntimeError")
    session.no_report_yet()
    digest, names = session.digest(), session.names()

    session.fails_with_cuda_error(session.notebook.bug)
    session.check_diagnosis(session.report())
    session.typo()
    session.failing_import()

    said = session.restart("--diagnose")
    assert "diagnos" in said, said
    pinned = session.report()
    assert pinned["restarted"] is True and pinned["pinned"], {k: pinned[k] for k in ("restarted", "pinned")}
    session.check_diagnosis(pinned)
    session.check_state_back(names, digest)
    session.fix_and_continue()
    assert session.trainings() == 1


def journey_check(session: Session) -> None:
    """``%cudaguard check on``: the planted bug is stopped before it poisons, with the right family and variable;
    the context stays healthy and the trained state untouched; fix, continue."""
    session.step("%cudaguard check on")
    session.setup_and_train()
    digest = session.digest()

    stopped = session.step(session.notebook.bug, ok=False)
    assert stopped.error["ename"].endswith("CheckError"), stopped.error
    family, variable = value(
        session.kernel, "(__import__('sys').last_value.family, __import__('sys').last_value.variable)"
    )
    assert family in session.notebook.families, (family, stopped.error["evalue"][:300])
    assert variable in session.notebook.variables, (variable, stopped.error["evalue"][:300])
    assert value(session.kernel, POISONED) is False
    assert value(session.kernel, HEALTHY) == 6.0
    assert session.digest() == digest
    session.typo()
    session.fix_and_continue()
    assert session.trainings() == 1


JOURNEYS = {"restart": journey_restart, "diagnose": journey_diagnose, "check": journey_check}
