"""The extension in a real IPython shell: loading, unloading, config, the journal, incidents."""

from __future__ import annotations

import json

import pytest

import nb_cudaguard
from nb_cudaguard import get_guard


def _callbacks(ip, event):
    return [cb for cb in ip.events.callbacks[event] if getattr(cb, "__self__", None) is nb_cudaguard.get_guard(ip)]


def test_loading_twice_registers_nothing_twice(shell):
    shell.run_line_magic("load_ext", "nb_cudaguard")
    nb_cudaguard.load_ipython_extension(shell)
    assert len(_callbacks(shell, "pre_run_cell")) == 1
    assert len(_callbacks(shell, "post_run_cell")) == 1
    assert "cudaguard" in shell.magics_manager.magics["line"]


def test_unload_removes_every_hook_magic_and_tap(shell):
    guard = nb_cudaguard.get_guard(shell)
    shell.run_line_magic("unload_ext", "nb_cudaguard")
    assert nb_cudaguard.get_guard(shell) is None
    for event in ("pre_run_cell", "post_run_cell"):
        assert not [cb for cb in shell.events.callbacks[event] if getattr(cb, "__self__", None) is guard]
    assert "cudaguard" not in shell.magics_manager.magics["line"]
    assert guard not in shell.configurables
    assert guard.capture._taps == []
    shell.run_line_magic("load_ext", "nb_cudaguard")  # the fixture unloads again


def test_config_through_percent_config(shell):
    shell.run_line_magic("config", "CudaGuard.capture_limit = 1234")
    guard = nb_cudaguard.get_guard(shell)
    assert guard.capture_limit == 1234 and guard.capture.limit == 1234


def test_journal_records_status_duration_and_names(shell):
    shell.run_cell("import math\nvalues = [math.sqrt(2)]", store_history=True)
    shell.run_cell("values.append(undefined_name)", store_history=True)
    shell.run_cell("!true", store_history=True)
    guard = nb_cudaguard.get_guard(shell)
    first, second, third = list(guard.journal)[-3:]
    assert (first.status, second.status, third.status) == ("ok", "error", "ok")
    assert second.error.startswith("NameError")
    assert first.duration > 0
    assert {"math", "values"} <= first.names.defined
    assert "values" in second.names.mutated
    third.transformed = shell.transform_cell(third.source)
    assert third.names.side_effects == {"shell"}


def test_a_cpu_index_error_is_explained_without_a_restart(shell, capsys):
    torch = pytest.importorskip("torch")
    shell.user_ns["torch"] = torch
    shell.run_cell(
        "logits = torch.randn(4, 3)\nlabels = torch.tensor([0, 1, 2, 3])\n"
        "loss = torch.nn.functional.cross_entropy(logits, labels)",
        store_history=True,
    )
    report = nb_cudaguard.get_guard(shell).last_report
    assert report.incident.classification == "not_cuda"
    # labels 0..3 against 3 logits: one class more than the output has
    assert report.diagnosis.top.family == "num_classes_mismatch"
    assert report.diagnosis.top.variable == "labels"
    assert "Target 3 is out of bounds" in report.incident.message
    assert report.incident.user_frame.line.startswith("loss = torch.nn.functional.cross_entropy")
    assert "no restart needed" in capsys.readouterr().out


def test_a_report_does_not_keep_alive_what_the_user_lets_go(shell, capsys):
    """The failing cell's namespace is read by the diagnosis, never copied into the report: a value the user drops
    afterwards (a graph held by ``out``, a big tensor after an out-of-memory error) is freed at once."""
    torch = pytest.importorskip("torch")
    shell.user_ns["torch"] = torch
    shell.run_cell("import weakref\nout = torch.ones(3, requires_grad=True) * 2", store_history=True)
    shell.run_cell(
        "loss = torch.nn.functional.cross_entropy(torch.randn(2, 3), torch.tensor([0, 5]))", store_history=True
    )
    assert nb_cudaguard.get_guard(shell).last_report is not None  # a report was made, and is kept
    shell.run_cell("held = weakref.ref(out)\nout = None\nimport gc; gc.collect()", store_history=True)
    assert shell.user_ns["held"]() is None


def test_a_simulated_device_assert_is_poisoned_with_its_assertion(shell, capsys):
    pytest.importorskip("torch")
    shell.run_cell("import torch\n%cudaguard simulate on", store_history=True)
    shell.run_cell(
        "emb = torch.nn.Embedding(10, 4).to('cuda')\nids = torch.tensor([1, 12]).to('cuda')", store_history=True
    )
    shell.run_cell("out = emb(ids)", store_history=True)
    report = nb_cudaguard.get_guard(shell).last_report
    assert report.incident.classification == "poisoned"
    [record] = report.incident.assertions
    assert record.condition == "srcIndex < srcSelectDimSize" and record.count == 4
    assert report.diagnosis.top.family == "embedding_index_out_of_range"
    shell.run_cell("print(torch.ones(2, device='cuda') + 1)", store_history=True)  # innocent, and still fails
    assert nb_cudaguard.get_guard(shell).last_report.incident.classification == "poisoned"
    assert "POISONED" in capsys.readouterr().out


def test_report_formats(shell, capsys):
    shell.run_cell("raise RuntimeError('CUDA error: an illegal memory access was encountered')", store_history=True)
    capsys.readouterr()
    shell.run_line_magic("cudaguard", "report --json")
    data = json.loads(capsys.readouterr().out)
    assert data["causes"][0]["family"] == "illegal_memory_access"
    shell.run_line_magic("cudaguard", "report --markdown")
    markdown = capsys.readouterr().out
    assert markdown.startswith("### nb_cudaguard") and "· illegal_memory_access</sub>" in markdown


def test_plain_errors_stay_quiet(shell, capsys):
    shell.run_cell("1/0", store_history=True)
    assert "nb_cudaguard" not in capsys.readouterr().out
    assert nb_cudaguard.get_guard(shell).last_report is None  # no incident: nothing for %cudaguard report either


@pytest.mark.parametrize(
    "source",
    ["print(undefined_name)", "{'a': 1}['b']", "torch.zeros(2, device=device) + torch.zeros(3, device=device)",
     "import nonexistent_module_for_the_test", "1/0"],
)  # fmt: skip
def test_plain_errors_stay_quiet_once_cuda_works(shell, capsys, source):
    """On a GPU every session initialises CUDA, so the probe answers "healthy" after any error: that says nothing
    about a NameError, which must get no report (it once got "CUDA error, but the context still works")."""
    pytest.importorskip("torch")
    shell.run_line_magic("cudaguard", "simulate on")
    shell.run_cell("import torch\ndevice = 'cuda'\nx = torch.ones(3, device=device)", store_history=True)
    capsys.readouterr()
    result = shell.run_cell(source, store_history=True)
    assert result.error_in_exec is not None
    guard = nb_cudaguard.get_guard(shell)
    assert guard.last_report is None and guard.incidents == []
    assert guard.journal.last.cuda is False
    shell.run_line_magic("cudaguard", "report")
    assert "no failing cell recorded yet" in capsys.readouterr().out


def test_a_typo_after_a_poisoning_is_no_incident_and_a_sticky_error_is_the_first_ones(shell, capsys):
    """The typo is left to IPython; a later cell that dies of the sticky error reports the first failure's cause
    and names its cell; the restart still rebuilds for the first failing cell."""
    pytest.importorskip("torch")
    from nb_cudaguard.replay.plan import failing_cell

    shell.run_line_magic("cudaguard", "simulate on")
    shell.run_cell("import torch\nimport torch.nn as nn\ndevice = 'cuda'", store_history=True)
    shell.run_cell("emb = nn.Embedding(10, 4).to(device)\nids = torch.tensor([1, 12]).to(device)", store_history=True)
    first = shell.run_cell("out = emb(ids)", store_history=True)
    assert "device-side assert" in str(first.error_in_exec)
    guard = nb_cudaguard.get_guard(shell)
    origin = guard.last_report
    assert origin.incident.classification == "poisoned"
    family = origin.diagnosis.top.family
    capsys.readouterr()
    shell.run_cell("print(idss.max())", store_history=True)  # the typo reads no name that exists
    assert guard.last_report is origin and "nb_cudaguard" not in capsys.readouterr().out
    sticky = shell.run_cell("y = torch.ones(2, device=device).sum().item()", store_history=True)
    assert "CUDA error" in str(sticky.error_in_exec)
    follow = guard.last_report
    assert follow.origin is origin and follow.diagnosis.top.family == family
    assert f"because cell {origin.incident.cell.label} had already poisoned" in follow.to_text()
    assert json.loads(follow.to_json())["first_failure"]["incident"]["cell"]["source"] == "out = emb(ids)"
    assert failing_cell(guard.journal).source == "out = emb(ids)"


def test_usage_errors_do_not_raise_into_the_user(shell, capsys):
    shell.run_cell("%cudaguard frobnicate", store_history=True)
    assert "invalid choice" in capsys.readouterr().err


def test_the_success_path_does_not_touch_cuda(shell):
    torch = pytest.importorskip("torch")
    for n in range(50):
        shell.run_cell(f"x{n} = {n} * 2", store_history=True)
    assert not torch.cuda.is_initialized()
    assert nb_cudaguard.get_guard(shell).incidents == []


def test_unload_turns_off_what_the_extension_turned_on(shell):
    from nb_cudaguard import testing

    assert not testing.is_enabled()
    shell.run_line_magic("cudaguard", "simulate on")
    shell.run_line_magic("cudaguard", "check on")
    every_cell = get_guard(shell).every_cell
    assert testing.is_enabled() and every_cell.enabled
    shell.run_line_magic("unload_ext", "nb_cudaguard")
    assert not testing.is_enabled() and not every_cell.enabled
    assert every_cell.pre_run_cell not in shell.events.callbacks["pre_run_cell"]


def test_the_extension_s_own_state_is_what_a_restart_carries_and_sets_again(shell):
    from nb_cudaguard import testing
    from nb_cudaguard.relaunch.handoff_content import SessionState

    shell.run_line_magic("cudaguard", "simulate on")
    shell.run_line_magic("config", "CudaGuard.carry = False")
    shell.run_line_magic("config", "CudaGuard.show_report = 'always'")
    state = get_guard(shell).session_state()
    assert state == SessionState(simulate=True, check=False, config={"carry": False, "show_report": "always"})
    assert SessionState.from_dict(state.to_dict()) == state  # as the Handoff writes and reads it

    shell.run_line_magic("unload_ext", "nb_cudaguard")
    shell.config.pop("CudaGuard", None)
    shell.run_line_magic("load_ext", "nb_cudaguard")  # a fresh session, as in the new process
    guard = get_guard(shell)
    assert not testing.is_enabled() and guard.carry
    problems = guard.restore_session(SessionState(True, True, False, {**state.config, "no_such_option": 1}))
    assert testing.is_enabled() and guard.every_cell.enabled and not guard.carry and guard.show_report == "always"
    assert problems == ["CudaGuard.no_such_option is no option of this nb_cudaguard"]
    guard.every_cell.set(False)
