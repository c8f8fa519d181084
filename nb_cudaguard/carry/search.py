"""Which cells to skip: the search behind the carry plan.

The plan minimises the expected time to a ready state: the recorded duration of each replayed cell plus, for each
carried value, its measured cost (``carry_plan.cost_of``), within the size budget. Skipping cells interacts: two
cells that each build half of what one slow cell feeds them save that slow cell only when both are skipped, so a
search that toggles one cell at a time stops short of the best plan. The search is therefore exact: it walks the
plan backward from the ready state, as the plan itself does, and branches at each cell that may be skipped, so
choices that share their later cells share that part of the walk. Branches whose two outcomes are the same (a cell
whose values nothing needs) are walked once, and a branch stops as soon as what it has cost, plus the least that
the names it still needs must cost, is no better than the best plan found so far (starting from the plan a greedy
search finds). A name still needed is paid for at the next cell back that writes it, either by replaying that cell
or by carrying the name, so each such cell costs at least the lesser of the two.

The number of choices doubles with each cell that may be skipped, and where they nearly tie (many independent
cells whose skipping saves about what carrying costs) no branch can be cut early: on the project's 2-core machine
such a case took 11 ms with 10 of those cells, 46 ms with 12, 190 ms with 14 (every other shape tried, up to 14
cells, took under 5 ms). So the walk stops after ``EXACT_BRANCHES`` branches (about 45 ms there) and keeps the
best plan found so far, never worse than the greedy one; the plan then says it may not be the best. Above
``EXACT_LIMIT`` cells that may be skipped it is not tried: that budget would cover a vanishing part of the choices.
The greedy plan stands there: it adds or takes out one cell at a time while that lowers the expected time, which
finds the best plan when the cells do not interact (the shape of the near-tie case above).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nb_cudaguard.carry.planner import Planner

EXACT_LIMIT = 14
EXACT_BRANCHES = 4000

_State = tuple[frozenset, frozenset, float, int]  # (names needed, names carried, seconds, bytes carried)


class Search:
    """Choices of cells to skip, priced by ``prices`` (name: (seconds, bytes) of each value that may be carried)."""

    def __init__(
        self, planner: Planner, needs: Iterable[str], prices: dict[str, tuple[float, int]], max_bytes: int
    ) -> None:
        self.planner = planner
        self.cells = list(reversed(planner.cells))
        self.start: _State = (frozenset(needs), frozenset(), 0.0, 0)
        self.prices = prices
        self.max_bytes = max_bytes
        self.complete = True  # False when the plan chosen may not be the best (the exact search was cut short)

    def _move(self, record, skip: bool, state: _State) -> _State | None:
        """The walk one cell further back; None if that breaks a rule or carries a value that cannot be."""
        needed, loaded, seconds, count = state
        moved = self.planner.advance(record, skip, needed, loaded)
        if moved is None:
            return None
        _, spent, needed, now_loaded, load = moved
        for name in load - loaded:
            price = self.prices.get(name)
            if price is None:
                return None
            seconds, count = seconds + price[0], count + price[1]
        if count > self.max_bytes:
            return None
        return needed, now_loaded, seconds + spent, count

    def total(self, skipped: set[int]) -> float | None:
        """Expected seconds to ready when the cells in ``skipped`` are skipped; None if that breaks a rule."""
        state = self.start
        for record in self.cells:
            moved = self._move(record, record.seq in skipped, state)
            if moved is None:
                return None
            state = moved
        return state[2]

    def best(self, forced: set[int], free: set[int]) -> set[int]:
        """The cells to skip: ``forced`` ones always, any of ``free`` where that lowers the expected time."""
        chosen = self._greedy(forced, free)
        if len(free) > EXACT_LIMIT:
            self.complete = False
            return chosen
        bound = self.total(chosen)
        better = self._exact(forced, free, bound if bound is not None else float("inf"))
        return set(better) if better is not None else chosen

    def _greedy(self, forced: set[int], free: set[int]) -> set[int]:
        chosen, best = set(forced), self.total(forced)
        improved = True
        while improved and best is not None:
            improved = False
            for seq in sorted(free):
                trial = chosen ^ {seq}
                seconds = self.total(trial)
                if seconds is not None and seconds < best - 1e-9:
                    chosen, best, improved = trial, seconds, True
        return chosen

    def _writers_ahead(self) -> list[tuple[frozenset, dict[str, tuple[int, float]]]]:
        """For each position of the walk, the names some cell left there writes (binds or changes), each with the
        position of the next such cell and the name's price: a name still needed there is paid for at that cell,
        by replaying it or by carrying the name."""
        ahead: list[dict[str, tuple[int, float]]] = [{}]
        for index in range(len(self.cells) - 1, -1, -1):  # the earliest cell first
            writes = self.planner.facts(self.cells[index])[0]
            ahead.append({**ahead[-1], **{n: (index, self.prices.get(n, (float("inf"),))[0]) for n in writes}})
        ahead.reverse()
        return [(frozenset(names), names) for names in ahead]

    def _exact(self, forced: set[int], free: set[int], bound: float) -> frozenset | None:
        """The cheapest choice of the free cells that beats ``bound``, or None if none does. The walk stops after
        ``EXACT_BRANCHES`` branches, keeping the best choice found so far (``self.complete`` then says so)."""
        best: list = [bound, None]
        ahead = self._writers_ahead()
        durations = [record.duration for record in self.cells]
        branches = [0]

        def hopeless(index: int, state: _State) -> bool:
            """True when even the least the needed names must cost cannot beat the best: each next writer of a
            needed name costs at least its duration or the price of the dearest of those names it would carry."""
            names, writers = ahead[index]
            least: dict[int, float] = {}
            for name in state[0] & names:
                at, price = writers[name]
                if price > least.get(at, 0.0):
                    least[at] = price
            floor = sum(min(durations[at], price) for at, price in least.items())
            return state[2] + floor >= best[0] - 1e-9

        def visit(index: int, state: _State, chosen: frozenset) -> None:
            while index < len(self.cells) and self.cells[index].seq not in free:
                record = self.cells[index]
                moved = self._move(record, record.seq in forced, state)
                if moved is None or hopeless(index + 1, moved):
                    return
                state = moved
                index += 1
            if hopeless(index, state):
                return
            if index == len(self.cells):
                best[:] = [state[2], chosen]
                return
            branches[0] += 1
            if branches[0] > EXACT_BRANCHES:
                self.complete = False
                return
            record = self.cells[index]
            skipped, kept = self._move(record, True, state), self._move(record, False, state)
            if skipped is not None and skipped != kept:
                visit(index + 1, skipped, chosen | {record.seq})
            if kept is not None:
                visit(index + 1, kept, chosen)

        visit(0, self.start, frozenset(forced))
        return best[1]
