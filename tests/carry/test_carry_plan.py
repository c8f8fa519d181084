"""The carry plan from journals built cell by cell and real values (pure and fast): what is pickled, what stays on
disk, and which cells the search skips."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest
from journal_helpers import journal_of
from test_carry import read_back

from nb_cudaguard.carry import value as carry
from nb_cudaguard.carry.plan import build_carry_plan
from nb_cudaguard.carry.planner import Planner
from nb_cudaguard.carry.search import Search
from nb_cudaguard.replay.plan import build_plan

BUDGET = dict(max_bytes=10**9, max_seconds=60.0)


def carry_plan(cells, namespace, directory=None, **options):
    journal = journal_of(*cells)
    return build_carry_plan(build_plan(journal), journal, namespace, directory=directory, **{**BUDGET, **options})


def actions(plan) -> dict[int, str]:
    return {step.record.execution_count: step.action for step in plan.steps}


@pytest.fixture
def pickles(monkeypatch) -> list[str]:
    """The names ``carry.measure`` pickles, in order (the real function runs)."""
    names: list[str] = []
    real = carry.measure

    def counted(name, *args, **kwargs):
        names.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(carry, "measure", counted)
    return names


def test_with_a_directory_each_value_is_pickled_once_and_only_the_carried_ones_stay_on_disk(tmp_path, pickles):
    cells = (
        ("import numpy as np", 0.001),
        ("slow = np.arange(100_000)", 5.0),
        ("fast = np.arange(400_000)", 0.0001),  # cheaper to run again than to carry
        ("print(slow, fast)\nmissing", 0.0, "NameError: name 'missing' is not defined"),
    )
    namespace = {"np": np, "slow": np.arange(100_000), "fast": np.arange(400_000)}
    plan = carry_plan(cells, namespace, tmp_path)
    assert actions(plan) == {1: "replay", 2: "carry", 3: "replay"}
    assert sorted(pickles) == ["fast", "np", "slow"]  # once each: the carried one is not pickled again to be written
    measure = plan.measures["slow"]
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted([measure.file, measure.buffers])  # fast's files were deleted with the plan made
    stream, buffers = (tmp_path / measure.file).read_bytes(), (tmp_path / measure.buffers).read_bytes()
    assert hashlib.sha256(stream).hexdigest() == measure.sha256
    assert hashlib.sha256(buffers).hexdigest() == measure.buffers_sha256
    assert measure.spans == [(0, 800_000)] and measure.mapped_bytes == 800_000  # the array's memory, out of band
    assert len(stream) + len(buffers) == measure.bytes
    assert all((tmp_path / file).stat().st_mode & 0o777 == 0o600 for file in files)
    assert (read_back(measure, tmp_path) == namespace["slow"]).all()


def test_without_a_directory_nothing_is_written_and_the_plan_is_the_same(tmp_path, pickles):
    cells = (("big = list(range(100_000))", 5.0), ("print(big)\nmissing", 0.0, "NameError: boom"))
    plan = carry_plan(cells, {"big": list(range(100_000))})
    assert actions(plan) == {1: "carry"} and pickles == ["big"]
    assert plan.measures["big"].file is None and plan.measures["big"].sha256 is None


def test_a_value_measured_past_the_disk_budget_is_written_once_the_plan_carries_it(tmp_path, pickles):
    # a is measured first and fills most of the budget; z, measured past it, gets no file but is the one worth
    # carrying: a's file goes and z is written
    cells = (
        ("import numpy as np", 0.001),
        ("z = np.arange(1_000_000)", 10.0),
        ("a = np.arange(1_000_000, 2_000_000)", 0.5),
        ("print(z, a)\nmissing", 0.0, "NameError: boom"),
    )
    namespace = {"np": np, "z": np.arange(1_000_000), "a": np.arange(1_000_000, 2_000_000)}
    plan = carry_plan(cells, namespace, tmp_path, max_bytes=12_000_000)
    assert actions(plan) == {1: "replay", 2: "carry", 3: "replay"}
    assert pickles == ["a", "np", "z", "z"]
    measure = plan.measures["z"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([measure.file, measure.buffers])
    assert (read_back(measure, tmp_path) == namespace["z"]).all()


def test_a_pickle_that_fails_half_way_leaves_no_file_and_its_cell_is_replayed(tmp_path):
    cells = (
        ("import threading\nimport numpy as np", 0.1),
        ("halfway = {'data': np.arange(100_000), 'lock': threading.Lock()}", 5.0),
        ("print(halfway)\nmissing", 0.0, "NameError: boom"),
    )
    namespace = {"np": np, "threading": threading, "halfway": {"data": np.arange(100_000), "lock": threading.Lock()}}
    plan = carry_plan(cells, namespace, tmp_path)
    assert actions(plan) == {1: "replay", 2: "replay"}
    assert plan.refused["halfway"] == "could not be pickled (TypeError: cannot pickle '_thread.lock' object)"
    assert list(tmp_path.iterdir()) == []


def test_the_search_finds_the_best_plan_where_skipping_either_cell_alone_does_not_pay():
    # left and right each come from the slow raw, which cannot be carried: skipping one of their cells alone
    # still replays raw's cell and carries a value that costs more than its cell; skipping both drops raw's cell
    cells = (
        ("raw = open_stream()", 10.0),
        ("left = half(raw, 0)", 0.0001),
        ("right = half(raw, 1)", 0.0001),
        ("print(left, right)\nmissing", 0.0, "NameError: boom"),
    )
    namespace = {"raw": (i for i in range(3)), "left": np.arange(100_000), "right": np.arange(100_000, 200_000)}
    plan = carry_plan(cells, namespace)
    assert plan.refused["raw"] == "holds a generator"
    assert actions(plan) == {1: "skip", 2: "carry", 3: "carry"}
    assert plan.carried == ["left", "right"] and plan.expected_seconds < 1.0


def test_where_choices_nearly_tie_the_exact_search_stops_at_its_limit_and_says_so():
    # 14 independent cells, each saving a little more than carrying its value costs: no branch can be cut early
    count = 14
    cells = [(f"p{i} = open_stream({i})\nopen('log')", 0.001) for i in range(count)]
    cells += [(f"v{i} = half(p{i})", 0.0001) for i in range(count)]
    cells.append((f"print({', '.join(f'v{i}' for i in range(count))})\nmissing", 0.0, "NameError: boom"))
    journal = journal_of(*cells)
    base = build_plan(journal)
    planner = Planner(base, journal, {name: 0 for i in range(count) for name in (f"p{i}", f"v{i}")})
    prices = {f"v{i}": (0.00105 + i * 1e-6, 8) for i in range(count)}
    search = Search(planner, base.target.names.used, prices, max_bytes=10**9)
    free = {record.seq for record in base.records if record.first_line.startswith("v")}
    chosen = search.best(set(), free)
    assert not search.complete  # about 45 ms on a 2-core machine; 190 ms for the whole walk
    assert chosen == free  # the best plan: every v carried, which the greedy start had found already
