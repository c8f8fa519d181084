"""After a fast check fired, the two ways on with no restart, typed as magics in a real IPython shell:
``%cudaguard rerun --exact`` (the fired cell under the exact checks) and ``%cudaguard rerun --rebuild`` (the cells
the replay planner says build what the fired cell changed, never the fired cell itself)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

from nb_cudaguard import CudaCheckError, get_guard  # noqa: E402
from nb_cudaguard.check.fast.error import FastCheckError  # noqa: E402
from nb_cudaguard.replay.plan import build_plan, rebuild_plan  # noqa: E402

# ``feats`` is built by two cells (a binding, then an in-place change); ``emb`` and ``ids`` are read by the failing
# cell but not changed by it; ``unrelated`` has nothing to do with it.
SETUP = [
    "import torch\nimport torch.nn.functional as F\ntorch.manual_seed(0)",
    "emb = torch.nn.Embedding(10, 4)",
    "ids = torch.tensor([1, 12])",
    "feats = torch.zeros(2, 4)",
    "feats += 1",
    "unrelated = [0]",
    "%env NBCG_REBUILD_TEST=1",
    "%cudaguard check on",
]
FAILING = "feats = feats + emb(ids)\nunrelated_copy = list(unrelated)"


def _run(shell, code: str):
    return shell.run_cell(code, store_history=True)


@pytest.fixture
def fired(shell):
    """The shell after the fast check fired in FAILING (a real Embedding, a real out-of-range id, on the CPU)."""
    for cell in SETUP:
        assert _run(shell, cell).success, cell
    with capture_output():
        error = _run(shell, FAILING).error_in_exec
    assert isinstance(error, FastCheckError), error
    yield shell, error
    shell.run_line_magic("cudaguard", "check off")


def _labels(shell, *sources: str) -> list[str]:
    records = {record.source: record.label for record in get_guard(shell).journal}
    return [records[source] for source in sources]


def test_the_error_names_the_two_commands_and_the_cells_the_planner_picks(fired) -> None:
    shell, error = fired
    assert error.changed_names == ["feats", "unrelated_copy"]
    built_by = _labels(shell, "feats = torch.zeros(2, 4)", "feats += 1")
    assert error.rebuild_cells == [(built_by[0], ["feats"]), (built_by[1], ["feats"])]
    choices = str(error).splitlines()[-1]
    assert "%cudaguard rerun --exact" in choices and "%cudaguard rerun --rebuild" in choices
    assert f"{built_by[0]} (feats), {built_by[1]} (feats)" in choices and "no restart" in choices


def test_rerun_exact_stops_the_same_op_with_the_same_family_and_variable(fired) -> None:
    shell, fast = fired
    with capture_output() as shown:
        result = _run(shell, "%cudaguard rerun --exact")
    exact = result.error_in_exec
    assert isinstance(exact, CudaCheckError) and not isinstance(exact, FastCheckError)
    assert (exact.family, exact.variable) == (fast.family, fast.variable) == ("embedding_index_out_of_range", "ids")
    assert exact.op == "aten.embedding" and exact.values == [12]
    label = get_guard(shell).last_fired.record.label
    assert f"running {label} again under the exact checks" in shown.stdout
    assert f"cell {label}, line 1: feats = feats + emb(ids)" in exact.user_line  # its label and line, as recorded
    assert shell.user_ns["feats"].ne(1).any()  # the exact checks stopped the op: feats is still the fast run's

    _run(shell, "ids = torch.tensor([1, 2])")  # the input fixed: the same command now runs through
    before = shell.user_ns["feats"].clone()
    with capture_output() as shown:
        result = _run(shell, "%cudaguard rerun --exact")
    assert result.success and "ran without a failure under the exact checks" in shown.stdout
    with torch.no_grad():  # it ran the fired cell itself, on the fixed ids
        assert torch.equal(shell.user_ns["feats"], before + shell.user_ns["emb"](torch.tensor([1, 2])))


def test_rerun_rebuild_runs_the_cells_that_build_the_names_and_not_the_failing_cell(fired) -> None:
    shell, _ = fired
    assert not torch.equal(shell.user_ns["feats"], torch.ones(2, 4))  # wrong: feats + emb(clamped ids)
    shell.user_ns["unrelated"].append("touched")  # the cell that built it must not run again
    _run(shell, "ids = torch.tensor([1, 2])")  # the fix
    with capture_output() as shown:
        result = _run(shell, "%cudaguard rerun --rebuild")
    assert result.success, result.error_in_exec
    assert torch.equal(shell.user_ns["feats"], torch.ones(2, 4))  # [4] then [5]; the failing cell did not run
    assert shell.user_ns["unrelated"] == [0, "touched"] and "unrelated_copy" in shell.user_ns
    zeros, plus_one, failing = _labels(shell, "feats = torch.zeros(2, 4)", "feats += 1", FAILING)
    assert f"Re-ran {zeros}, {plus_one}" in shown.stdout and f"then run {failing} again" in shown.stdout
    assert "built by" in shown.stdout and "unrelated_copy" in shown.stdout  # only the failing cell makes it


def test_a_rebuilt_cell_that_fails_is_said_and_stops_the_rest(fired) -> None:
    shell, _ = fired
    shell.user_ns["torch"] = None  # the next re-run of "feats = torch.zeros(2, 4)" fails
    with capture_output() as shown:
        result = _run(shell, "%cudaguard rerun --rebuild")
    assert result.success
    zeros, plus_one = _labels(shell, "feats = torch.zeros(2, 4)", "feats += 1")
    assert f"then {zeros} failed (AttributeError: 'NoneType' object has no attribute 'zeros')" in shown.stdout
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("  not run")] == [
        ["not", "run", plus_one, "feats", "+=", "1"]
    ]


def test_dry_run_prints_the_plan_and_usage_is_checked(fired) -> None:
    shell, _ = fired
    with capture_output() as shown:
        assert _run(shell, "%cudaguard rerun --rebuild --dry-run").success
    assert "replay plan (rebuild" in shown.stdout and "feats += 1" in shown.stdout
    assert "unrelated = [0]" not in shown.stdout and "failing cell alone (only running it" in shown.stdout
    for wrong in ("rerun", "rerun --exact --rebuild", "rerun --exact --dry-run", "rerun --all"):
        with pytest.raises(UsageError):
            shell.run_line_magic("cudaguard", wrong)


def test_without_a_fired_check_rerun_says_so(shell) -> None:
    with pytest.raises(UsageError, match="no fast check has fired"):
        shell.run_line_magic("cudaguard", "rerun --exact")


def test_the_plan_follows_only_wrong_names_and_skips_process_magics(fired) -> None:
    """Rebuilding ``feats`` needs neither the cells that built ``emb`` or ``ids`` nor the imports (they are healthy
    in the living process) nor ``%env`` (the process is the same one: a restart's plan would keep it)."""
    shell, _ = fired
    guard = get_guard(shell)
    plan = rebuild_plan(guard.journal, ["feats"], guard.last_fired.record)
    assert [record.source for record in plan.records] == ["feats = torch.zeros(2, 4)", "feats += 1"]
    assert plan.unresolved == set()
    restart_plan = build_plan(guard.journal, "minimal", target=guard.last_fired.record)
    assert "%env NBCG_REBUILD_TEST=1" in [record.source for record in restart_plan.records]
