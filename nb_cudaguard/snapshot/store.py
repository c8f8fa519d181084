"""Snapshots of the GPU-resident state at cell boundaries: what each cell did to it, and the last good copy.

After every successful cell (``after_cell``) the roots are found again and compared with what the cell before
left: a root whose object is new at a path was *constructed* by this cell, one whose metadata fingerprint changed
was *trained* (changed in place). A cell that trained something also leaves the random generators' states of that
boundary, so that a replay which skips it can put them back exactly.

A snapshot is taken when the state changed and it is worth it within the budgets:

* time: its copy is expected to cost at most ``max_fraction`` of the cells that changed the state since the last
  one (the bandwidth is learnt from the copies already made), so a fast cell that touches a big model is covered
  at the next slow one, or the one after, never at its own expense;
* memory: the copy must fit in ``max_bytes`` and in the memory available to this process (its cgroup's limit
  inside a container) with a reserve left, counting the previous snapshot, which stays until the new one is done.

On a GPU the copy is still running when the hook returns; it is *confirmed* only once its event reports done
(polled, never waited for, before the next cell and at the restart). A copy overtaken by a poisoned context never
becomes the snapshot: the restart uses the last confirmed one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.carry.place import memory_available
from nb_cudaguard.record.journal import CellRecord
from nb_cudaguard.snapshot.copy import Copier, Copies, NotSnapshotable, RootState, rng_states
from nb_cudaguard.snapshot.find import Root, find_roots, fingerprint, may_change_roots, tensors_of

# The copy's expected cost before one has been measured: pinned device-to-host copies reach 10-25 GB/s, a host
# memcpy more, so 2 GB/s is on the safe (slow) side; and a fixed cost per tensor (the call, the allocation), which
# is what small states cost. Both are learnt from the copies made: the bandwidth from copies of 8 MB and more.
_FIRST_GUESS_BYTES_PER_SECOND = 2e9
_FIRST_GUESS_SECONDS_PER_TENSOR = 50e-6
_LEARN_BANDWIDTH_FROM = 8 << 20
_RESERVE_BYTES = 1 << 30
_EFFECTS_KEPT = 2000


@dataclass
class CellEffect:
    """What one successful cell did to the roots: paths it built (a new object there) and paths it changed in
    place, each with the object's id; and the generators' states it left, when it changed something."""

    constructed: dict[str, int] = field(default_factory=dict)
    trained: dict[str, int] = field(default_factory=dict)
    tops: dict[str, str] = field(default_factory=dict)  # path -> the namespace name it starts from
    rng: dict[str, Any] | None = None


@dataclass
class Snapshot:
    seq: int  # the journal position of the cell it was taken after
    label: str
    taken_at: float
    roots: list[RootState]
    identities: dict[str, int]  # path -> id of the object copied
    rng: dict[str, Any]
    copies: Copies
    tensors: int = 0
    hook_seconds: float = 0.0

    @property
    def nbytes(self) -> int:
        return sum(root.nbytes for root in self.roots)


class Snapshots:
    """The session's snapshotter; the extension calls ``before_cell`` and ``after_cell`` around every cell."""

    def __init__(self, steps: dict[int, int] | None = None) -> None:
        self.copier = Copier()
        self.effects: dict[int, CellEffect] = {}
        self.confirmed: Snapshot | None = None
        self.pending: Snapshot | None = None
        self.refused: dict[str, str] = {}  # path -> why it is not kept
        self.deferred = ""  # why the last change is not covered yet ("" when it is)
        self._last: dict[str, tuple[int, tuple]] = {}  # path -> (id, fingerprint) after the last cell
        self._dirty_seconds = 0.0  # time of the cells that changed the state since the last snapshot
        self._bandwidth = _FIRST_GUESS_BYTES_PER_SECOND
        self._per_tensor = _FIRST_GUESS_SECONDS_PER_TENSOR
        self.hook_seconds = 0.0  # all the success path spent here, for the status line and the benchmark
        self.cells_seconds = 0.0
        # optimizer steps per optimizer (by id), counted by the journal's observer (``record.observe``) from torch's
        # global step hook: a step changes parameters in place, which version counters tell too on a GPU, but not
        # for ``_foreach_*`` ops run under a Python dispatch mode (the simulated GPU), where the CPU kernels' inner
        # ops skip the version bump
        self.steps = steps if steps is not None else {}

    # --- the hooks
    def before_cell(self) -> None:
        """Order the next cell's GPU work after a copy still in flight, and confirm a copy that is done."""
        if self.pending is not None:
            self.pending.copies.order_next_cell()
            self.poll()

    def poll(self) -> None:
        pending = self.pending
        if pending is None:
            return
        try:
            done = pending.copies.done()
        except RuntimeError:  # the context was poisoned before the copy finished: it is not a snapshot
            self.pending = None
            return
        if done:
            self._learn(pending)
            self.confirmed, self.pending = pending, None

    def _learn(self, snapshot: Snapshot) -> None:
        seconds, count = snapshot.copies.copy_seconds(), snapshot.tensors
        fixed = count * self._per_tensor
        if snapshot.nbytes >= _LEARN_BANDWIDTH_FROM and seconds > fixed:
            self._bandwidth = snapshot.nbytes / (seconds - fixed)
        elif count:
            self._per_tensor = max(seconds - snapshot.nbytes / self._bandwidth, 0.0) / count

    def expected_seconds(self, nbytes: int, tensors: int) -> float:
        """What copying that much is expected to cost, from the copies made so far."""
        return tensors * self._per_tensor + nbytes / self._bandwidth

    def after_cell(self, record: CellRecord, namespace: dict, hidden: Any, max_bytes: int, max_fraction: float) -> None:
        begun = time.perf_counter()
        self.cells_seconds += record.duration
        if record.observed is not None and not may_change_roots(record.observed, namespace):
            self.hook_seconds += time.perf_counter() - begun
            return  # the walk below costs what the namespace holds: only after a cell that can have changed it
        roots = find_roots(namespace, hidden)
        effect = self._effect(roots)
        if effect.constructed or effect.trained:
            effect.rng = rng_states()
            self.effects[record.seq] = effect
            if len(self.effects) > _EFFECTS_KEPT:
                del self.effects[min(self.effects)]
            self._dirty_seconds += record.duration
            self._maybe_take(record, roots, max_bytes, max_fraction, effect.rng)
        self.hook_seconds += time.perf_counter() - begun

    def _effect(self, roots: list[Root]) -> CellEffect:
        effect = CellEffect()
        now: dict[str, tuple[int, tuple]] = {}
        for root in roots:
            mark = (id(root.obj), (*fingerprint(root), self.steps.get(id(root.obj))))
            now[root.path] = mark
            before = self._last.get(root.path)
            if before is None or before[0] != mark[0]:
                effect.constructed[root.path] = mark[0]
            elif before[1] != mark[1]:
                effect.trained[root.path] = mark[0]
            effect.tops[root.path] = root.top
        # an optimizer stepped in this cell: changed in place, or built here and stepped already (a ``Trainer``
        # builds its own inside ``train()``); a new one's step count is all this cell's
        stepping = {
            r.path
            for r in roots
            if r.kind == "optimizer"
            and (r.path in effect.trained or (r.path in effect.constructed and self._steps_of(r.obj) > 0))
        }
        stepped = {id(p) for r in roots if r.path in stepping for p in tensors_of(r)}
        for root in roots:  # a module whose parameters a stepped optimizer holds was trained by that step
            fresh = root.path in effect.constructed
            if root.kind == "module" and not fresh and any(id(p) in stepped for p in root.obj.parameters()):
                effect.trained[root.path] = id(root.obj)
        self._last = now
        return effect

    def _steps_of(self, optimizer: Any) -> int:
        """The steps counted for an optimizer, or for the one it wraps (accelerate's ``AcceleratedOptimizer``, which
        a ``Trainer`` holds, steps the torch optimizer inside it, and the step hook sees that one)."""
        for _ in range(4):
            if id(optimizer) in self.steps:
                return self.steps[id(optimizer)]
            optimizer = getattr(optimizer, "optimizer", None)
            if optimizer is None:
                break
        return 0

    def _maybe_take(self, record: CellRecord, roots: list[Root], max_bytes: int, fraction: float, rng: dict) -> None:
        tensors = _unique(t for root in roots for t in tensors_of(root))
        size = sum(int(t.numel() * t.element_size()) for t in tensors)
        expected = self.expected_seconds(size, len(tensors))
        if expected > fraction * self._dirty_seconds:
            self.deferred = (
                f"the change of {record.label} is not covered yet: copying {size_text(size)} would take about "
                f"{expected:.3f} s, more than {fraction:.0%} of the {self._dirty_seconds:.2f} s it would protect"
            )
            return
        held = self.confirmed.nbytes if self.confirmed is not None else 0
        available = memory_available()
        room = max_bytes - held
        if available is not None:
            room = min(room, available - max(_RESERVE_BYTES, available // 10))
        if size > room:
            self.deferred = f"not protected: a snapshot needs {size_text(size)}, {size_text(max(room, 0))} is free"
            return
        self.poll()
        if self.pending is not None:  # a copy still in flight: the next change is taken once it is done
            self.deferred = f"the change of {record.label} waits for the previous copy"
            return
        started = time.perf_counter()
        states: list[RootState] = []
        self.copier.prepare(roots)
        with self.copier.batch() as copies:
            for root in roots:
                try:
                    states.append(self.copier.capture(root))
                except NotSnapshotable as exc:
                    self.refused[root.path] = str(exc)
                except Exception as exc:  # a state_dict that fails: that object is rebuilt by replay
                    self.refused[root.path] = f"its state could not be read ({type(exc).__name__}: {exc})"
        identities = {root.path: id(root.obj) for root in roots if root.path not in self.refused}
        snapshot = Snapshot(record.seq, record.label, time.time(), states, identities, rng, copies, len(tensors))
        snapshot.hook_seconds = time.perf_counter() - started
        self.pending, self.deferred, self._dirty_seconds = snapshot, "", 0.0
        self.poll()

    # --- for the restart and the status line
    def latest(self) -> Snapshot | None:
        """The snapshot a restart can use: the last confirmed copy (a copy in flight counts once it is done)."""
        self.poll()
        return self.confirmed

    def status(self) -> str:
        snapshot = self.confirmed or self.pending
        share = self.hook_seconds / self.cells_seconds if self.cells_seconds else 0.0
        cost = f"{self.hook_seconds:.3f} s on the success path, {share:.2%} of the cells' time"
        if snapshot is None:
            return f"nothing on the GPU protected yet ({self.deferred or 'no trained state seen'}); {cost}"
        names = ", ".join(root.path for root in snapshot.roots)
        age = time.time() - snapshot.taken_at
        text = (
            f"{names} ({size_text(snapshot.nbytes)}) as after cell {snapshot.label}, {age_text(age)} old; "
            f"copied in {snapshot.copies.copy_seconds():.3f} s; {cost}"
        )
        if self.deferred:
            text += f"; {self.deferred}"
        if self.refused:
            text += "; not kept: " + "; ".join(f"{path} ({why})" for path, why in sorted(self.refused.items()))
        return text


def _unique(tensors: Any) -> list[Any]:
    seen: set[int] = set()
    found = []
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            found.append(tensor)
    return found


def size_text(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 1e5 else f"{count} bytes"


def age_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
