"""The replay plan, from journals built cell by cell (pure and fast), and from a real IPython shell."""

from __future__ import annotations

import pytest
from journal_helpers import journal_of

from nb_cudaguard.record.cellnames import analyse
from nb_cudaguard.record.journal import Journal
from nb_cudaguard.replay.plan import ReplayPlan, build_plan, failing_cell

CUDA_ERROR = "AcceleratorError: CUDA error: device-side assert triggered"


def labels(plan: ReplayPlan) -> list[int]:
    return [step.record.execution_count for step in plan.steps]


NOTEBOOK = (
    ("import torch\nimport torch.nn.functional as F", 1.2),  # 1
    ("torch.manual_seed(0)\nmodel = torch.nn.Linear(3, 4)", 0.1),  # 2
    ("data = torch.arange(6.0).reshape(2, 3)", 0.01),  # 3
    ("def logits_of(x):\n    return model(x) * scale", 0.0),  # 4
    ("labels = [0]", 0.0),  # 5
    ("labels.append(7)", 0.0),  # 6
    ("import time\ntime.sleep(5)\nunrelated = torch.zeros(1)", 5.0),  # 7: slow and not needed
    ("scale = 2.0", 0.0),  # 8: read by logits_of at call time, though bound after it
    ("%cd /tmp", 0.0),  # 9: changes the process
    ("!echo downloaded", 0.3),  # 10: its effect is on disk
    ("scale = 100.0  # cudaguard: skip", 0.0),  # 11
    ("loss = F.cross_entropy(logits_of(data), torch.tensor(labels))", 0.2, CUDA_ERROR),  # 12
    ("torch.ones(1) + 1", 0.0, CUDA_ERROR),  # 13: fails only because the context is poisoned
)


def test_minimal_plan_keeps_what_the_failing_cell_needs_and_leaves_out_the_slow_unrelated_cell():
    plan = build_plan(journal_of(*NOTEBOOK))
    assert plan.target.execution_count == 12  # the first cell of the sticky CUDA error, not the last one
    assert labels(plan) == [1, 2, 3, 4, 5, 6, 8, 9]
    assert plan.recorded_seconds == pytest.approx(1.2 + 0.1 + 0.01)
    reasons = {step.record.execution_count: step.reason for step in plan.steps}
    assert reasons[6] == "changes labels"
    assert reasons[9].startswith("sets up the process (%cd")
    excluded = {step.record.execution_count: step.reason for step in plan.excluded}
    assert excluded[7] == "not needed by [12]"
    assert excluded[11] == "marked '# cudaguard: skip'"
    assert excluded[12] == "the failing cell"
    assert excluded[13] == "failed"
    assert 10 in excluded  # a shell line: what it did to the disk is still there


def test_all_plan_is_every_successful_cell_but_never_a_skipped_or_failed_one():
    plan = build_plan(journal_of(*NOTEBOOK), "all")
    assert labels(plan) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert plan.recorded_seconds == pytest.approx(sum(c[1] for c in NOTEBOOK[:10]))


def test_a_name_bound_again_without_being_read_hides_its_earlier_bindings():
    plan = build_plan(journal_of(("x = expensive()", 60.0), ("x = 2", 0.0), ("print(x)", 0.0, "NameError: boom")))
    assert labels(plan) == [2]
    assert plan.unresolved == set()  # `expensive` is read only by the cell that was left out


def test_conditional_and_augmented_bindings_keep_the_earlier_cells():
    journal = journal_of(
        ("total = 1", 0.0),
        ("if flag:\n    total = 5", 0.0),
        ("flag = True", 0.0),
        ("total += 1", 0.0),
        ("print(total)", 0.0, "ValueError: x"),
    )
    # the conditional binding may not have happened, so the cell before it stays; flag was bound after the
    # conditional cell had read it, so it is not part of what the failing cell sees
    assert labels(build_plan(journal)) == [1, 2, 4]


def test_del_global_and_comprehensions_are_followed():
    journal = journal_of(
        ("values = [1, 2, 3]", 0.0),
        ("factor = 3", 0.0),
        ("scaled = [v * factor for v in values]", 0.0),
        ("def bump():\n    global counter\n    counter = len(scaled)", 0.0),
        ("bump()", 0.0),
        ("del factor", 0.0),
        ("print(counter)", 0.0, "KeyError: k"),
    )
    plan = build_plan(journal)
    assert labels(plan) == [1, 2, 3, 4, 5]
    assert build_plan(journal_of(("a = 1", 0.0), ("del a", 0.0), ("a", 0.0, "NameError: a"))).steps[1].reason == (
        "binds a"
    )


def test_user_edits_add_drop_and_explicit_cells():
    journal = journal_of(*NOTEBOOK)
    edited = build_plan(journal, add=[7], drop=[9])
    assert labels(edited) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert {s.record.execution_count: s.reason for s in edited.excluded}[9] == "dropped by you"
    refused = build_plan(journal, add=[11, 13, 99])
    assert 11 not in labels(refused) and 13 not in labels(refused)
    assert any("cannot be added: marked" in note for note in refused.notes)
    assert any("[99] is not in the journal" in note for note in refused.notes)
    assert labels(build_plan(journal, cells=[3, 1, 11])) == [1, 3]
    assert build_plan(journal, "none").steps == []


def test_plan_text_shows_each_cell_with_its_duration():
    text = build_plan(journal_of(*NOTEBOOK)).to_text()
    assert "for the failing cell [12]" in text
    assert "    [7]     5.00 s  import time" in text
    assert "    [1]     1.20 s  import torch" in text
    assert "Left out:" in text


def test_plan_round_trips_through_the_handoff_form():
    journal = journal_of(*NOTEBOOK)
    plan = build_plan(journal)
    again = ReplayPlan.from_dict(plan.to_dict(), Journal.from_json(journal.to_json()))
    assert labels(again) == labels(plan)
    assert again.target.execution_count == 12
    assert [s.reason for s in again.steps] == [s.reason for s in plan.steps]


def test_failing_cell_is_the_last_failure_when_it_is_not_a_sticky_cuda_error():
    journal = journal_of(("a = 1", 0.0), ("b", 0.0, "NameError: b"), ("c", 0.0, "NameError: c"))
    assert failing_cell(journal).execution_count == 3


def test_a_typo_after_a_cuda_failure_does_not_become_the_failing_cell():
    journal = journal_of(*NOTEBOOK, ("prnt(loss)", 0.0, "NameError: name 'prnt' is not defined"))
    journal.by_seq(12).cuda = journal.by_seq(13).cuda = True
    assert failing_cell(journal).execution_count == 12
    assert 1 in labels(build_plan(journal))  # the rebuild still brings back what cell 12 reads


def test_after_a_restart_a_later_failure_is_the_failing_cell_again():
    journal = journal_of(
        ("x = torch.ones(1)", 0.0, CUDA_ERROR), ("%cudaguard restart", 0.0), ("y", 0.0, "NameError: y")
    )
    journal.by_seq(1).cuda = True
    journal.by_seq(2).status = "restart"
    assert failing_cell(journal).execution_count == 3


def test_no_failing_cell_means_the_minimal_plan_is_every_successful_cell():
    plan = build_plan(journal_of(("a = 1", 0.0), ("b = a", 0.0)))
    assert plan.target is None and labels(plan) == [1, 2]
    assert plan.notes


def test_cell_analysis_sees_through_ipython_syntax():
    captured = analyse("%%capture out\nresult = model(batch)\n")
    assert {"out", "result"} <= captured.defined and {"model", "batch"} <= captured.used
    timed = analyse("%time y = f(x)")
    assert "y" in timed.defined and {"f", "x"} <= timed.used
    listing = analyse("files = !ls")
    assert listing.defined == {"files"} and "shell" in listing.side_effects
    assert analyse("%cudaguard restart --replay all").magics == [("cudaguard", "restart --replay all")]
    numpy = analyse("import numpy as np\narr = np.zeros(3)")
    assert numpy.call_mutated == {"np"} and numpy.imported == {"np"}
    assert analyse("def f():\n    return g(k)").deferred == {"g", "k"}


def test_dry_run_in_a_real_shell(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import nb_cudaguard

    shell = InteractiveShell.instance()
    nb_cudaguard.load_ipython_extension(shell)
    try:
        first = shell.execution_count  # the shell is shared with other tests: counts do not start at 1
        for cell in ("base = 10", "unused = [0] * 3", "def f(v):\n    return v + base", "f(undefined_here)"):
            shell.run_cell(cell, store_history=True)
        with capture_output() as out:
            shell.run_cell("%cudaguard replay --dry-run", store_history=True)
        assert "minimal" in out.stdout
        assert "binds base" in out.stdout and "binds f" in out.stdout
        assert "not needed by" in out.stdout and "unused = [0] * 3" in out.stdout
        assert "undefined_here" in out.stdout
        with capture_output() as out:
            shell.run_cell(f"%cudaguard replay --dry-run --all --drop {first}", store_history=True)
        assert "(all," in out.stdout and "dropped by you" in out.stdout
    finally:
        nb_cudaguard.unload_ipython_extension(shell)


def test_a_class_reads_no_global_from_its_methods_parameters():
    """``def forward(self, ids)`` inside a class binds ``self`` and ``ids`` for that method: no global read of them,
    so a plan does not say the failing cell reads names "bound by no recorded cell"."""
    from nb_cudaguard.record.cellnames import analyse

    names = analyse(
        "class Net(nn.Module):\n"
        "    def __init__(self, dim):\n        super().__init__()\n        self.head = nn.Linear(dim, 2)\n"
        "    def forward(self, ids):\n        return self.head(ids)\n"
        "model = Net(vocab_size)"
    )
    assert names.used == {"nn", "vocab_size"}, names.used


def test_the_plan_says_which_line_of_a_kept_cell_built_each_value_the_failing_cell_reads():
    """A row shows a cell's first line; the line that built the bad labels is further down (the shell's smoke test:
    ``X = ...`` then ``labels = torch.tensor([...])`` in one cell)."""
    plan = build_plan(
        journal_of(
            ("import torch\nimport torch.nn.functional as F", 1.0),
            (
                "X = torch.randn(4, 3)\nlabels = torch.tensor([0, 1, 2, 9])\nif X.sum() > 0:\n    labels = labels * 1",
                0.1,
            ),
            ("labels = torch.tensor([0, 1, 2, 3])  # cudaguard: skip", 0.0),
            ("loss = F.cross_entropy(X, labels)", 0.2, CUDA_ERROR),
        )
    )
    text = plan.to_text()
    where = text.split("Where the failing cell [4] gets what it reads:\n", 1)[1].splitlines()
    assert where[:2] == [
        "  X       [2] line 1: X = torch.randn(4, 3)",
        "  labels  [2] line 2: labels = torch.tensor([0, 1, 2, 9])",
    ], text
    assert not any(line.startswith("  F ") or line.startswith("  torch ") for line in where)  # modules: not data
    assert "[3]" not in "\n".join(where[:2])  # a cell the plan leaves out is not where the data came from
