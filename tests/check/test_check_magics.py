"""%%cudacheck and %cudaguard check in a real IPython shell, against the simulated GPU, and in a real kernel."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from IPython.core.error import UsageError  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.testing.globalipapp import start_ipython  # noqa: E402

import nb_cudaguard  # noqa: E402
from nb_cudaguard import CudaCheckError, testing  # noqa: E402
from nb_cudaguard.diagnosis.causes import Cause, cause_from_check  # noqa: E402

SETUP = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
logits = torch.randn(4, 5)
labels = torch.tensor([0, 5, 2, 1])
"""


@pytest.fixture
def shell():
    start_ipython()  # once per process; later calls return None
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "nb_cudaguard")
    ip.run_cell(SETUP)
    yield ip
    ip.run_line_magic("cudaguard", "check off")
    ip.run_line_magic("unload_ext", "nb_cudaguard")
    testing.reset()


def _stack():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return _get_current_dispatch_mode_stack()


def test_cudacheck_names_variable_line_and_range(shell) -> None:
    result = shell.run_cell("%%cudacheck\nx = 1\nloss = F.cross_entropy(logits, labels)\n")
    err = result.error_in_exec
    assert isinstance(err, CudaCheckError) and isinstance(err, RuntimeError)
    assert (err.op, err.argument, err.family, err.variable) == (
        "aten.nll_loss_forward",
        "target",
        "label_out_of_range",
        "labels",
    )
    assert err.values == [5] and err.positions == [(1,)] and err.count == 1
    assert "line 3: loss = F.cross_entropy(logits, labels)" in err.user_line  # numbered as the user sees the cell
    assert "cell [" in err.user_line
    assert _stack() == []  # the checker left
    ok = shell.run_cell("float(F.cross_entropy(logits, labels.clamp(max=4)))")  # the next cell runs
    assert ok.error_in_exec is None and isinstance(ok.result, float)


def test_cudacheck_returns_last_expression_and_keeps_names(shell) -> None:
    result = shell.run_cell("%%cudacheck\ny = labels.clamp(max=4)\nF.cross_entropy(logits, y)")
    assert result.error_in_exec is None
    assert torch.equal(result.result, torch.nn.functional.cross_entropy(shell.user_ns["logits"], shell.user_ns["y"]))
    assert _stack() == []


def test_cudacheck_sync_option_and_usage(shell) -> None:
    result = shell.run_cell("%%cudacheck --sync\nz = F.one_hot(labels.clamp(max=4), 5).sum()")
    assert result.error_in_exec is None and int(shell.user_ns["z"]) == 4
    bad = shell.run_cell("%%cudacheck --bogus\n1")
    assert isinstance(bad.error_in_exec, UsageError) and "--bogus" in str(bad.error_in_exec)


def test_cudacheck_help_lists_every_option(shell) -> None:
    doc = shell.find_cell_magic("cudacheck").__doc__  # what %%cudacheck? shows
    assert "%%cudacheck [-h] [--sync]" in doc and "--sync" in doc and "--help" in doc
    shown = shell.run_cell("%%cudacheck --help\n1")
    assert isinstance(shown.error_in_exec, UsageError) and "--sync" in str(shown.error_in_exec)


def test_every_cell_check_on_and_off(shell, capsys) -> None:
    shell.run_line_magic("cudaguard", "check on")
    assert "every cell" in capsys.readouterr().out
    failed = shell.run_cell("F.cross_entropy(logits, labels)")
    assert isinstance(failed.error_in_exec, CudaCheckError)
    assert _stack() == []  # left after the failing cell too
    ok = shell.run_cell("emb = torch.nn.Embedding(3, 2); emb(torch.tensor([2]))")
    assert ok.error_in_exec is None
    nested = shell.run_cell("%%cudacheck\nF.cross_entropy(logits, labels)")  # no double checks
    assert isinstance(nested.error_in_exec, CudaCheckError)
    shell.run_line_magic("cudaguard", "check off")
    unchecked = shell.run_cell("F.cross_entropy(logits, labels)")
    assert type(unchecked.error_in_exec) is IndexError  # the CPU's own error: the checks are off
    assert _stack() == []


def test_every_cell_checks_survive_user_modes_pushed_on_top(shell) -> None:
    shell.run_line_magic("cudaguard", "check on --exact")  # the dispatch mode is the exact mode's
    shell.run_cell(
        textwrap.dedent(
            """
            from torch.utils._python_dispatch import TorchDispatchMode
            class Seen(TorchDispatchMode):
                ops = 0
                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    Seen.ops += 1
                    return func(*args, **(kwargs or {}))
            seen = Seen()
            seen.__enter__()
            """
        )
    )
    stack = _stack()
    assert [type(m).__name__ for m in stack] == ["Seen"]  # ours left from under the user's mode, which stays
    failed = shell.run_cell("F.cross_entropy(logits, labels)")
    assert isinstance(failed.error_in_exec, CudaCheckError)
    assert shell.user_ns["Seen"].ops > 0
    shell.run_cell("seen.__exit__(None, None, None)")  # pops the checker (the top), so the checker takes `seen` off
    assert _stack() == []


def test_simulation_switched_off_under_every_cell_check(shell) -> None:
    shell.run_line_magic("cudaguard", "check on")
    shell.run_line_magic("cudaguard", "simulate on")
    checked = shell.run_cell("F.cross_entropy(logits, labels)")
    assert isinstance(checked.error_in_exec, CudaCheckError) and not testing.is_poisoned()
    shell.run_line_magic("cudaguard", "simulate off")
    assert not testing.is_enabled()
    shell.run_line_magic("cudaguard", "check off")
    assert _stack() == []


def test_simulated_gpu_is_not_poisoned_when_cudacheck_stops_the_op(shell) -> None:
    testing.enable()
    shell.run_cell("logits, labels = logits.to('cuda'), labels.to('cuda')")  # on the simulated GPU
    checked = shell.run_cell("%%cudacheck\nloss = F.cross_entropy(logits, labels)")
    assert isinstance(checked.error_in_exec, CudaCheckError)
    assert not testing.is_poisoned()
    fine = shell.run_cell("(logits + 1).sum().item()")
    assert fine.error_in_exec is None
    unchecked = shell.run_cell("loss = F.cross_entropy(logits, labels)")  # the same cell without the checks
    assert "device-side assert triggered" in str(unchecked.error_in_exec)
    assert testing.is_poisoned()


def test_check_error_as_cause_and_dict(shell) -> None:
    err = shell.run_cell("%%cudacheck\nF.cross_entropy(logits, labels)").error_in_exec
    cause = cause_from_check(err)
    assert isinstance(cause, Cause)
    assert (cause.family, cause.confidence, cause.variable) == ("label_out_of_range", 1.0, "labels")
    evidence = cause.evidence[0]
    assert evidence.direct and evidence.kind == "guard"
    assert evidence.values == [5] and evidence.positions == [(1,)] and evidence.count == 1
    assert evidence.valid_range.startswith("[0, 5)") and "classes" in evidence.range_source
    assert "F.cross_entropy(logits, labels)" in evidence.source_line
    assert cause.fix == err.fix and cause.to_dict()["family"] == "label_out_of_range"
    # a label >= C: the labels or the head is wrong, and the check cannot tell which, so its fix names both
    assert "labels - 1" in err.fix and "out_features" in err.fix, err.fix
    assert err.to_dict()["argument"] == "target"


def test_import_does_not_import_torch() -> None:
    code = (
        "import sys, nb_cudaguard; assert nb_cudaguard.CudaCheckError.__mro__[1] is RuntimeError; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert nb_cudaguard.CudaCheckError is CudaCheckError


@pytest.mark.kernel
def test_real_kernel_next_cell_runs_after_cudacheck_error() -> None:
    from nb_cudaguard.cli.kernelsession import KernelSession

    with KernelSession() as kernel:
        assert kernel.run("%load_ext nb_cudaguard").status == "ok"
        assert kernel.run(SETUP).status == "ok"
        failed = kernel.run("%%cudacheck\nloss = F.cross_entropy(logits, labels)")
        assert failed.status == "error" and failed.error["ename"] == "CudaCheckError"
        assert "argument target (labels)" in failed.error["evalue"]
        assert "  offending values: 5 at [1]" in failed.error["evalue"]  # the whole message, as str() has it
        # what the frontend shows: the compact block, the cell's frame and no library's
        (shown,) = [o for o in failed.outputs if o["output_type"] == "error"]
        lines = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(shown["traceback"])).splitlines()
        assert lines[0].startswith("CudaCheckError: aten.nll_loss_forward: argument target (labels) has 1 value")
        assert lines[0].endswith("line 2: loss = F.cross_entropy(logits, labels)") and len(lines) < 12
        assert not [line for line in lines if "site-packages" in line or "nb_cudaguard/" in line]
        after = kernel.run("print(int(F.cross_entropy(logits, labels.clamp(max=4)).isfinite()))")
        assert after.status == "ok" and after.stdout.strip() == "1"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_context_stays_healthy_after_cudacheck() -> None:
    from nb_cudaguard.check.mode import Checker

    logits = torch.randn(4, 5, device="cuda")
    labels = torch.tensor([0, 5, 2, 1], device="cuda")
    with Checker(), pytest.raises(CudaCheckError):
        torch.nn.functional.cross_entropy(logits, labels)
    with Checker(), pytest.raises(CudaCheckError) as info:
        torch.nn.functional.one_hot(labels, 5)
    assert info.value.family == "one_hot_num_classes"
    torch.cuda.synchronize()
    assert float((logits + 1).sum().cpu()) == pytest.approx(float(logits.sum().cpu()) + 20)
