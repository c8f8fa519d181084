"""Everything an analyser may look at for one incident, with the safe, cached ways to read tensors.

After a real device-side assert the values of every tensor on the GPU are gone: only their shape, dtype and device
can be read. So a tensor named in the failing line is read in this order, and the evidence says which source gave
the values and which could not be read:

1. the tensor itself, when it is on the host or the context is healthy;
2. the host object it was built from, found in the source without running anything: ``labels.to(device)`` in the
   failing call is ``labels``; ``labels = torch.tensor([0, 3, -1], device=device)`` holds its values as a literal;
   ``y = torch.from_numpy(y_all).to(device)`` came from ``y_all``; a loader's batch came from its dataset;
3. nothing: the cause is inferred from shapes and the source, and "Restart, replay & diagnose" pins the values.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field, replace

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.static import CallSite, Fact, LineFacts, StaticFacts
from nb_cudaguard.diagnosis.evidence.workspace import Named, Workspace
from nb_cudaguard.diagnosis.tensors import (
    OutOfRange,
    TensorSummary,
    is_array_like,
    is_floating,
    outside,
    readable,
    shape_of,
    summarize,
)
from nb_cudaguard.families import fix_of, summary_of
from nb_cudaguard.incident.incident import Incident
from nb_cudaguard.record.copies import COPIES

# Calls that move or reshape a tensor without changing its values: `labels.to(device)` holds labels' values.
_SAME_VALUES = frozenset(
    {
        "to", "cuda", "cpu", "unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "flatten",
        "contiguous", "detach", "clone", "view_as", "reshape_as", "t", "permute", "transpose", "long", "int",
    }
)  # fmt: skip
_CASTS = frozenset({"long", "int"})  # value-preserving only on integers: a NaN cast to an index is INT64_MIN
_CONSTRUCTORS = frozenset({"tensor", "as_tensor", "from_numpy", "LongTensor", "IntTensor", "asarray", "array"})
COPIED = "copied"  # the ``where`` of a host tensor the runtime saw copied to the device under the same name
RESTART_HINT = "Restart, replay & diagnose re-runs the cell under %%cudacheck on a healthy context and pins them"


def _strip(node: ast.expr) -> tuple[ast.expr, bool]:
    """The expression a chain of value-preserving calls starts from, and whether an integer cast was peeled."""
    cast = False
    while isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _SAME_VALUES:
            cast = cast or func.attr in _CASTS
            node = func.value
        elif (isinstance(func, ast.Attribute) and func.attr in _CONSTRUCTORS) or (
            isinstance(func, ast.Name) and func.id in _CONSTRUCTORS
        ):
            if not node.args:
                break
            node = node.args[0]
        else:
            break
    return node, cast


@dataclass
class Origin:
    """Where a device tensor's values came from, read from the source: a host object, or a literal."""

    line: str
    expression: ast.expr
    cast: bool  # an integer cast on the way (a float source would have lost its NaN to INT64_MIN)


@dataclass
class Context:
    incident: Incident
    workspace: Workspace
    static: StaticFacts
    line: LineFacts
    expected_groups: frozenset[str] = frozenset()  # what the error text and traceback point at, before any value
    _summaries: dict[int, TensorSummary] = field(default_factory=dict, repr=False)

    @property
    def health(self) -> str:
        return self.incident.health.state

    @property
    def source_line(self) -> str | None:
        frame = self.incident.user_frame
        return f"{frame.where}: {frame.line}" if frame is not None and frame.line else None

    # --- reading, bounded and safe
    def summary(self, obj: object) -> TensorSummary:
        key = id(obj)
        if key not in self._summaries:
            self._summaries[key] = summarize(obj, self.health)
        return self._summaries[key]

    def readable(self, obj: object) -> bool:
        return readable(obj, self.health)[0]

    def outside(self, obj: object, low: float | None, high: float | None, **kwargs: object) -> OutOfRange | None:
        return outside(obj, low, high, health_state=self.health, **kwargs)  # type: ignore[arg-type]

    def values_outside(
        self, named: Named, low: float | None, high: float | None, **kwargs: object
    ) -> tuple[OutOfRange | None, Named]:
        """The range check on ``named``, else on the host object it was built from; and which of the two was read."""
        found = self.outside(named.obj, low, high, **kwargs)
        if found is not None:
            return found, named
        copy = self.copied_from(named) or self.host_copy(named.name)
        if copy is not None:
            found = self.outside(copy.obj, low, high, **kwargs)
            if found is not None:
                return found, copy
        return None, named

    # --- names
    def tensor(self, expression: str | None) -> Named | None:
        """The tensor an expression in the failing line refers to, named as the user knows it. An inline
        expression (``labels.to(device)``, ``a.unsqueeze(1)``, ``idx.expand_as(m)``) is the variable it starts from."""
        if not expression:
            return None
        obj = self.workspace.resolve(expression)
        if not is_array_like(obj):
            try:
                node, cast = _strip(ast.parse(expression.strip(), mode="eval").body)
            except SyntaxError:
                return None
            base = ast.unparse(node)
            obj = self.workspace.resolve(base) if base != expression.strip() else None
            if not is_array_like(obj) or (cast and is_floating(obj)):
                return None
            expression = base
        return Named(self.workspace.name_of(obj) or expression, obj)

    def value(self, expression: str | None) -> object | None:
        return self.workspace.resolve(expression) if expression else None

    def call_target(self, call: CallSite) -> object | None:
        """What the failing line calls (a loss module, a model, an embedding), when it is reachable."""
        expression = f"{call.receiver}.{call.name}" if call.receiver else call.name
        return self.workspace.resolve(expression)

    # --- where a device tensor came from
    def origin(self, name: str) -> Origin | None:
        """The last assignment ``name = <call>`` in the cells and the host expression it starts from."""
        facts: list[Fact] = [f for facts in self.static.calls.values() for f in facts if f.target == name]
        if not facts:
            return None
        fact = facts[-1]
        node, cast = _strip(fact.value) if isinstance(fact.value, ast.expr) else (None, False)
        return Origin(fact.line, node, cast) if node is not None else None

    def copied_from(self, named: Named) -> Named | None:
        """The host tensor the runtime saw ``named`` copied from (``record.copies``), when ``named`` itself cannot be
        read: the batch ``yb.to(device)`` read, which the loop's name no longer holds."""
        if self.readable(named.obj):
            return None
        source = COPIES.source_of(named.obj)
        if source is None or not self.readable(source):
            return None
        own = self.workspace.name_of(source)  # a host tensor of the user's own: its name is what they know
        return Named(own, source) if own is not None else Named(named.name, source, COPIED)

    def host_copy(self, name: str) -> Named | None:
        """The host values a device tensor was built from: a literal in the source, or a readable host object."""
        origin = self.origin(name)
        if origin is None:
            return None
        try:
            values = ast.literal_eval(origin.expression)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            values = None
        numpy = sys.modules.get("numpy")
        if isinstance(values, (list, tuple)) and numpy is not None:
            try:
                return Named(f"the literal in `{origin.line}`", numpy.asarray(values))
            except ValueError:
                return None
        expression = ast.unparse(origin.expression)
        obj = self.workspace.resolve(expression)
        if isinstance(obj, list) and obj and numpy is not None and all(isinstance(v, (int, float)) for v in obj[:64]):
            obj = numpy.asarray(obj)
        if is_array_like(obj) and self.readable(obj) and not (origin.cast and is_floating(obj)):
            return Named(self.workspace.name_of(obj) or expression, obj)
        return None

    # --- building causes
    def tensor_evidence(self, named: Named, text: str, **kwargs: object) -> Evidence:
        summary = self.summary(named.obj)
        direct = bool(kwargs.pop("direct", summary.readable))
        if not summary.readable:
            text += f"; its values could not be read and no host copy was found: {RESTART_HINT}"
        label = f"{named.name} as copied from the host" if named.where == COPIED else named.name
        return Evidence(
            kind="tensor",
            text=f"{label}: {summary.to_text()}; {text}",
            direct=direct,
            variable=named.name,
            source_line=self.source_line,
            **kwargs,  # type: ignore[arg-type]
        )

    def cause(self, family: str, confidence: float, variable: str | None, fix: str, evidence: list[Evidence]) -> Cause:
        return Cause(
            family=family,
            confidence=confidence,
            summary=summary_of(family),
            fix=fix,
            evidence=evidence,
            variable=variable,
        )


def range_evidence(
    ctx: Context, named: Named, found: OutOfRange, valid: str, source: str, why: str, read: Named | None = None
) -> Evidence:
    """``read``: the host copy the values came from, when ``named`` itself could not be read.

    Worded as short sentences, the finding first: what breaks the range and why it matters, then where the values
    were read (and, for a copy, why the variable itself was not), then what the tensor read holds."""
    used = read if read is not None else named
    evidence = ctx.tensor_evidence(
        used,
        "",
        values=found.values,
        positions=[list(p) for p in found.positions],
        count=found.count,
        valid_range=valid,
        range_source=source,
    )
    said = [f"{found.count} value(s) outside {valid} ({source}): {_positions(named, used, found)}; {why}"]
    summary = ctx.summary(used.obj).to_text()
    if used is named:
        said.append(f"{named.name}: {summary}")
    else:
        evidence.direct = False
        unread = ctx.summary(named.obj)
        if used.where == COPIED:
            copy = f"the host tensor {named.name} was copied from"
        else:  # a name, or a literal of the source ("the literal in `...`")
            copy = used.name if used.name.startswith("the ") else f"the host copy {used.name}"
        said.append(f"Read from {copy}: {summary}")
        said.append(f"{named.name} itself, on {unread.device}, was not read: {unread.why_not}")
    evidence.text = ". ".join(said) + "."
    return evidence


def _positions(named: Named, used: Named, found: OutOfRange) -> str:
    """The offending values at their positions, under the variable's own name where the copy read has its shape
    (``ids[0, 2]=10``, not the literal's); the values alone where it has not (a literal unsqueezed on the device)."""
    if used is named or shape_of(used.obj) == shape_of(named.obj):
        return found.describe(named.name)
    if used.name.startswith("the "):
        return replace(found, positions=[]).describe(named.name)
    return found.describe(used.name)


def nan_holders(ctx: Context, names: list[str] | None = None, limit: int = 20) -> list[Named]:
    """Float tensors holding NaN/inf: those named in ``names`` (else the failing line) first, then a bounded look
    at the others. Only readable ones can say so."""
    first = set(names if names is not None else ctx.line.names)
    floats = [n for n in ctx.workspace.tensors if is_floating(n.obj)]
    floats.sort(key=lambda n: n.name.split("[")[0] not in first)
    holders = []
    for named in floats[:limit]:
        summary = ctx.summary(named.obj)
        if summary.nan or summary.inf:
            holders.append(named)
    return holders


def _non_finite(summary: TensorSummary) -> str:
    """What was read, and only that: "NaN" where a NaN was counted, "inf" where an infinity was."""
    seen = [word for word, count in (("NaN", summary.nan), ("inf", summary.inf)) if count]
    return "holds " + " and ".join(seen)


def nan_cause(ctx: Context, index: Named | None, evidence: list[Evidence], names: list[str] | None = None) -> Cause:
    """An index holding -9223372036854775808 (or built by casting a float that holds NaN): a NaN cast to an
    integer, not a negative id; the fix is upstream, where the NaN appears."""
    holders = nan_holders(ctx, names)
    evidence = evidence + [ctx.tensor_evidence(h, _non_finite(ctx.summary(h.obj))) for h in holders]
    variable = holders[0].name if holders and index is None else (index.name if index is not None else None)
    return ctx.cause("nan_or_inf", 0.9, variable, fix_of("nan_or_inf"), evidence)


def nan_cast_origin(ctx: Context, index: Named) -> Cause | None:
    """An unreadable index built by an integer cast of a float expression that holds NaN on the host."""
    origin = ctx.origin(index.name)
    if origin is None or not origin.cast:
        return None
    names = [n.id for n in ast.walk(origin.expression) if isinstance(n, ast.Name)]
    holders = [h for h in nan_holders(ctx, names) if h.name.split("[")[0].split(".")[0] in names]
    if not holders:
        return None
    text = f"`{origin.line}` casts a float expression to an integer index, and {holders[0].name} holds NaN"
    evidence = [Evidence("source", text, direct=False, variable=index.name, source_line=origin.line)]
    return nan_cause(ctx, index, evidence, names)
