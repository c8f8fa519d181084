"""A torch dispatch mode that checks the arguments of assert-prone ops before their kernels launch, and the
``Checker`` that switches it on for a block.

A CUDA device assert poisons the whole process; the same bad value caught on the host costs one exception. So
under ``%%cudacheck`` every aten op passes through :class:`CudaCheckMode`: ops with a device assert
(``ops.CHECKS``) get their index, label or probability arguments reduced on their own device (one
reduction each) and read back together (one synchronisation per op); every other op goes straight through.
A violation raises :class:`~nb_cudaguard.errors.CudaCheckError` before the op runs.

Two things a per-op check cannot see are handled here too: NaN/inf cast to an integer index (which CUDA turns
into 0 without a word) is remembered at the cast, with its finiteness reduced there and read only when the result
is used as an index; and ``sync=True`` synchronises after every op so that errors from kernels no check can see
(custom extensions) surface at the op that launched them. ``F.one_hot`` decomposes before dispatch; its CUDA
form, a ``scatter_`` of ones into zeros, is recognised in ``ops_index`` and reported as one_hot. (A torch
function mode could see ``F.one_hot`` by name, but any function mode turns off nn.Transformer's fused inference
path (``torch.overrides.has_torch_function``), which would change results.)

Dynamo does not compile frames while a dispatch mode is active (``torch/_dynamo/convert_frame.py``: "non-infra
torch dispatch mode present"), so a ``torch.compile``'d model runs eagerly under the checks and is checked. Where
a check meets tensors it cannot read (fake, meta or wrapper-subclass tensors, an older torch tracing under the
mode), it steps aside with a notice: the checks must never be what breaks a user's cell.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nb_cudaguard.check import render
from nb_cudaguard.check.conditions import Check, Condition, cast_condition, mark_nan_cast
from nb_cudaguard.check.context import Names, describe_line, user_frame, user_path
from nb_cudaguard.check.fast.board import BOARD
from nb_cudaguard.check.naming import user_name
from nb_cudaguard.check.ops import CHECKS
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.families import check_fix_of
from nb_cudaguard.incident import catalog, probe

_INDEX_DTYPES = (torch.int64, torch.int32)


def _resolve_checks() -> dict[Any, Check]:
    """OpOverload -> check, for every overload of every checked packet this torch has."""
    table: dict[Any, Check] = {}
    for packet_name, check in CHECKS.items():
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            table[getattr(packet, overload)] = check
    return table


class _Binder:
    """Schema-ordered argument names, so checks read ``a["target"]`` whatever the call looked like."""

    def __init__(self) -> None:
        self._cache: dict[Any, list[tuple[str, bool, bool, Any]]] = {}

    def bind(self, func, args: tuple, kwargs: dict) -> dict[str, Any]:
        spec = self._cache.get(func)
        if spec is None:
            spec = [
                (a.name, a.kwarg_only, a.has_default_value(), a.default_value if a.has_default_value() else None)
                for a in func._schema.arguments
            ]
            self._cache[func] = spec
        bound: dict[str, Any] = {}
        for position, (name, kwarg_only, has_default, default) in enumerate(spec):
            if not kwarg_only and position < len(args):
                bound[name] = args[position]
            elif name in kwargs:
                bound[name] = kwargs[name]
            elif has_default:
                bound[name] = default
        return bound


_KEEP_SOURCE = 1 << 20  # elements: smaller cast sources are kept alive with their index, to show the NaN itself


def _source_ref(source) -> Callable[[], Any]:
    """How to find a cast's floating source on the failure path. A small one is kept (it is usually a temporary,
    as in ``(p * n).long()``); a large one only weakly, so the checks never hold big tensors alive."""
    if source.numel() <= _KEEP_SOURCE:
        return lambda: source
    return weakref.ref(source)


class _Casts:
    """Integer tensors made from floating ones while the checks were on, with a not-yet-read finiteness flag."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[Any], Any, Callable[[], Any]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def record(self, result, flag, source_ref: Callable[[], Any]) -> None:
        key = id(result)

        def forget(ref, key=key) -> None:
            entry = self._by_id.get(key)
            if entry is not None and entry[0] is ref:
                del self._by_id[key]

        self._by_id[key] = (weakref.ref(result, forget), flag, source_ref)

    def lookup(self, t) -> tuple[Any, Callable[[], Any]] | None:
        entry = self._by_id.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1], entry[2]


class CudaCheckMode(TorchDispatchMode):
    """Checks assert-prone ops before they run. ``namespace``: the user's globals, to name their tensors."""

    def __init__(self, sync: bool = False, namespace: dict | None = None) -> None:
        super().__init__()
        render.install()
        self.sync = sync
        self.namespace = namespace
        self.checks = _resolve_checks()
        self.binder = _Binder()
        self.casts = _Casts()
        self.notices: list[str] = []
        self.checked: Counter[str] = Counter()  # ops checked, by name: what the checks actually looked at

    # --- the hot path
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        check = self.checks.get(func)
        if check is not None:
            self._check(func, check, args, kwargs)
        result = func(*args, **kwargs)
        if self.casts or func in _CAST_OPS:
            self._track_cast(func, args, kwargs, result)
        if self.sync:
            self._synchronize(func)
        return result

    # --- checks
    def cast_conditions(self, argument: str, index) -> list[Condition]:
        """The NaN/inf condition for an index that came from a float -> int cast under this mode."""
        if not self.casts or not isinstance(index, torch.Tensor):
            return []
        found = self.casts.lookup(index)
        if found is None:
            return []
        flag, source_ref = found
        return [cast_condition(argument, index, flag, source_ref)]

    def _check(self, func, check: Check, args: tuple, kwargs: dict) -> None:
        try:
            if _compiling():
                self.notice(f"{_op_name(func)} was not checked: it ran while torch.compile was tracing.")
                return
            conditions = check(self, self.binder.bind(func, args, kwargs))
            if not conditions:
                return
            stats = _read_back(conditions)
        except Exception as exc:
            if catalog.is_cuda_text(str(exc)):
                raise
            self.notice(f"{_op_name(func)} ran unchecked: the check itself failed ({type(exc).__name__}: {exc}).")
            return
        self.checked[_op_name(func)] += 1
        for condition, numbers in zip(conditions, stats, strict=True):
            if not condition.passes(numbers):
                raise self._error(func, condition, numbers) from None

    def _error(self, func, condition: Condition, numbers: list[float]) -> CudaCheckError:
        frame = user_frame(sys._getframe(1))
        user_line, via = user_path(frame).where()
        names = Names(frame, self.namespace)
        if condition.classify is not None:
            condition.family = condition.classify(numbers)
        try:
            with probe.internal_use():
                found = condition.offenders()
            if condition.refine is not None:
                condition.refine(condition, names)
            with probe.internal_use():
                mark_nan_cast(condition)  # last: a NaN cast says more than which table the index missed
                if condition.worded is not None:  # said as read: no NaN named where none was found
                    condition.problem = condition.worded()
            values, positions, count = found.values, found.positions, found.count
        except Exception as exc:  # the details are a courtesy; the error itself must still be raised
            self.notice(f"could not list the offending values ({type(exc).__name__}: {exc}).")
            values, positions, count = [], [], None
        try:
            with probe.internal_use():
                variable = user_name(names, condition.tensor)
        except Exception as exc:  # likewise: a name the user knows is a courtesy
            self.notice(f"could not name the argument ({type(exc).__name__}: {exc}).")
            variable = names.name_of(condition.tensor)
        return CudaCheckError(
            op=_op_name(func),
            argument=condition.argument,
            family=condition.family,
            problem=condition.problem.format(count=count if count is not None else "some"),
            values=values,
            positions=positions,
            count=count,
            valid_range=condition.valid_range,
            range_source=condition.range_source,
            variable=variable,
            user_line=user_line,
            via=via,
            fix=condition.fix or check_fix_of(condition.family),
        )

    # --- NaN/inf -> integer index provenance
    def _track_cast(self, func, args: tuple, kwargs: dict, result) -> None:
        if not isinstance(result, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
            return
        source: Any = args[0]
        if func in _CAST_OPS:
            if func is _COPY:  # copy_(dst, src): dst is the integer tensor, src the floating one
                source = args[1] if len(args) > 1 else None
                if not isinstance(source, torch.Tensor):
                    return
            if result.dtype not in _INDEX_DTYPES:
                return
            if source.is_floating_point() and _plain(source):
                self.casts.record(result, torch.isfinite(source).all(), _source_ref(source))
                return
        is_view = getattr(func, "is_view", False)
        if not is_view and func not in _CAST_OPS:
            return
        found = self.casts.lookup(source)  # a view or a device move of a tracked index keeps its provenance
        if found is None or result.dtype not in _INDEX_DTYPES:
            return
        flag, source_ref = found
        floating = source_ref()
        if is_view and floating is not None:  # the same view of the floating source, so positions line up
            try:
                floating = func(floating, *args[1:], **kwargs)
                source_ref = _source_ref(floating)
            except Exception:
                source_ref = _gone
        self.casts.record(result, flag, source_ref)

    # --- --sync
    def _synchronize(self, func) -> None:
        if not torch.cuda.is_initialized():
            return
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            frame = user_frame(sys._getframe(1))
            where = describe_line(frame) or "an unknown line"
            note = f"nb_cudaguard (%%cudacheck --sync): this error surfaced right after {_op_name(func)} ({where})."
            if hasattr(exc, "add_note"):
                exc.add_note(note)
            raise

    def notice(self, text: str) -> None:
        """Say once why something was not checked; never raise."""
        if text in self.notices:
            return
        self.notices.append(text)
        print(f"nb_cudaguard: {text}", file=sys.stderr)


class Checker:
    """``with Checker():`` checks every assert-prone op in the block. Re-entrant per instance is not supported."""

    def __init__(self, sync: bool = False, namespace: dict | None = None) -> None:
        self.mode = CudaCheckMode(sync=sync, namespace=namespace)
        self.active = False

    def __enter__(self) -> Checker:
        self.mode.__enter__()
        self.active = True
        BOARD.suspended += 1  # the fast checks, if on, must not clamp what this mode is about to check
        return self

    def __exit__(self, *exc) -> None:
        self.leave()

    def leave(self) -> None:
        """Leave the mode even if the user pushed others on top meanwhile: those are left and re-entered, so
        they stay active in the same order."""
        if not self.active:
            return
        self.active = False
        BOARD.suspended -= 1
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        modes = _get_current_dispatch_mode_stack()
        if self.mode not in modes:
            _drop_exited(modes)
            return
        above = modes[modes.index(self.mode) + 1 :]
        for other in reversed(above):
            other.__exit__(None, None, None)
        self.mode.__exit__(None, None, None)
        for other in above:
            other.__enter__()


def _drop_exited(modes: list) -> None:
    """``TorchDispatchMode.__exit__`` pops the top of the stack, whichever mode that is. A mode entered before the
    checker and exited while the checker was on top (``testing.disable()`` under ``%cudaguard check on``)
    therefore popped the checker and stayed on the stack itself; take it off, as its owner meant to."""
    from torch.utils._python_dispatch import _pop_mode, _push_mode

    exited = [m for m in modes if not getattr(m, "old_dispatch_mode_flags", True)]
    if not exited:
        return
    for _ in modes:
        _pop_mode()
    for other in modes:
        if other not in exited:
            _push_mode(other)


def checking(sync: bool = False, namespace: dict | None = None) -> Checker:
    """The checks as a context manager for scripts: ``with nb_cudaguard.check.mode.checking(): train_step()``."""
    return Checker(sync=sync, namespace=namespace)


def _read_back(conditions: list[Condition]) -> list[list[float]]:
    """All the conditions' stats, read with one transfer per device (one synchronisation on a GPU)."""
    by_device: dict[Any, list[int]] = {}
    results: list[list[float] | None] = [None] * len(conditions)
    for i, condition in enumerate(conditions):
        if isinstance(condition.stats, torch.Tensor):
            by_device.setdefault(condition.stats.device, []).append(i)
        else:
            results[i] = list(condition.stats)
    for members in by_device.values():
        flat = torch.cat([conditions[i].stats for i in members]).tolist()
        offset = 0
        for i in members:
            n = conditions[i].stats.numel()
            results[i] = flat[offset : offset + n]
            offset += n
    return results  # type: ignore[return-value]


def _gone() -> None:
    return None


def _op_name(func) -> str:
    name = str(func)
    return name[: -len(".default")] if name.endswith(".default") else name


def _plain(t) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta"


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


_COPY = torch.ops.aten.copy_.default
_CAST_OPS = frozenset({torch.ops.aten._to_copy.default, _COPY})
