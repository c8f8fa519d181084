"""Value-range losses and samplers: binary cross-entropy, multinomial, CTC, and dtype mistakes in loss inputs.

``BCELoss`` wants probabilities in [0, 1] for both arguments; a raw ``Linear`` output breaks the first, a 0..255
mask the second. ``multinomial`` wants finite, non-negative rows with a positive sum. CTC wants every target
length to fit its input length and no target to be the blank. Where the values cannot be read, the source still
tells: a ``BCELoss()`` with no sigmoid anywhere.
"""

from __future__ import annotations

from typing import Any

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.context import Context, range_evidence
from nb_cudaguard.diagnosis.evidence.static import CallSite
from nb_cudaguard.diagnosis.evidence.workspace import Named
from nb_cudaguard.diagnosis.tensors import is_floating
from nb_cudaguard.families import fix_of

# Said once the values (or the source) showed raw outputs: more pointed than the family's usual fix, so it is
# not replaced by the printed assertion's fix in the ranking.
_BCE_FIX = "Use nn.BCEWithLogitsLoss() on the raw outputs (it applies the sigmoid itself), or torch.sigmoid first."


def analyse(ctx: Context) -> list[Cause]:
    causes: list[Cause] = []
    for call in ctx.line.calls:
        kind = _kind(ctx, call)
        if kind == "bce":
            causes += _bce(ctx, call)
        elif kind == "multinomial":
            causes += _multinomial(ctx, call)
        elif kind == "ctc":
            causes += _ctc(ctx, call)
        elif kind in ("class_loss", "embedding"):
            causes += _dtype(ctx, call, kind)
    if not any(c.family.startswith("bce") for c in causes):
        causes += _bce_from_source(ctx)
    return causes


def _kind(ctx: Context, call: CallSite) -> str | None:
    target = ctx.call_target(call)
    type_name = type(target).__name__ if target is not None else ""
    name = call.name.lower()
    if type_name in ("BCELoss",) or name == "binary_cross_entropy":
        return "bce"
    if name == "multinomial":
        return "multinomial"
    if type_name == "CTCLoss" or name == "ctc_loss":
        return "ctc"
    if type_name in ("CrossEntropyLoss", "NLLLoss") or name in ("cross_entropy", "nll_loss"):
        return "class_loss"
    if hasattr(target, "num_embeddings") or name == "embedding":
        return "embedding"
    return None


def _pair(ctx: Context, call: CallSite) -> tuple[Named | None, Named | None]:
    first = call.keywords.get("input") or (call.args[0] if call.args else None)
    second = call.keywords.get("target") or (call.args[1] if len(call.args) > 1 else None)
    return ctx.tensor(first), ctx.tensor(second)


def _asserted(ctx: Context, word: str) -> bool:
    return any(word in a.condition for a in ctx.incident.assertions)


def _bce(ctx: Context, call: CallSite) -> list[Cause]:
    causes = []
    prediction, target = _pair(ctx, call)
    for named, family, fix in (
        (prediction, "bce_input_range", _BCE_FIX),
        (target, "bce_target_range", None),
    ):
        if named is None:
            continue
        found, read = ctx.values_outside(named, 0.0, 1.0, inclusive=True)
        if found is None and _asserted(ctx, "input_val" if family == "bce_input_range" else "target_val"):
            # The printed assertion names the argument; the values are on a poisoned device.
            evidence = [ctx.tensor_evidence(named, "the argument the printed assertion names", direct=False)]
            if family == "bce_input_range":
                evidence += [e for c in _bce_from_source(ctx) for e in c.evidence]
            fixed = fix or f"Targets must be in [0, 1]: binarise or rescale {named.name}."
            causes.append(ctx.cause(family, 0.5, named.name, fixed, evidence))
            continue
        if found is None or not found.count:
            continue
        why = "raw scores (logits), not probabilities" if family == "bce_input_range" else "targets must be in [0, 1]"
        if found.nan:
            why = f"{found.nan} NaN value(s): the model diverged before this loss"
        evidence = [range_evidence(ctx, named, found, "[0, 1]", "binary_cross_entropy", why, read)]
        if fix is None:
            top = ctx.summary(read.obj).max
            scale = " (divide a 0..255 mask by 255)" if isinstance(top, (int, float)) and top > 1 else ""
            fix = (
                f"Targets must be in [0, 1]: binarise or rescale {named.name}{scale}, e.g. ({named.name} > 0).float()."
            )
        causes.append(ctx.cause(family, 0.9, named.name, fix, evidence))
    return causes


def _bce_from_source(ctx: Context) -> list[Cause]:
    """No readable values: a ``BCELoss()`` in the source with no sigmoid anywhere is still a strong hint."""
    if not ctx.static.bce_losses or ctx.static.sigmoid:
        return []
    fact = ctx.static.bce_losses[-1]
    evidence = [
        Evidence(
            "source",
            f"`{fact.line}` and no sigmoid/softmax anywhere in the source: BCE gets raw outputs",
            direct=False,
            source_line=fact.line,
        )
    ]
    if ctx.workspace.linears:
        last = ctx.workspace.linears[-1]
        evidence.append(Evidence("module", f"the model ends in {last.name} = {last.obj!r}", direct=True))
    return [ctx.cause("bce_input_range", 0.55, fact.target, _BCE_FIX, evidence)]


def _multinomial(ctx: Context, call: CallSite) -> list[Cause]:
    method = call.receiver is not None and call.receiver not in ("torch", "th")
    probs = ctx.tensor(
        call.receiver if method else (call.keywords.get("input") or (call.args[0] if call.args else None))
    )
    if probs is None:
        return []
    summary = ctx.summary(probs.obj)
    fix = fix_of("multinomial_invalid_probs")
    if not summary.readable:
        evidence = [ctx.tensor_evidence(probs, "the sampled probabilities", direct=False)]
        return [ctx.cause("multinomial_invalid_probs", 0.5, probs.name, fix, evidence)]
    problems = []
    if summary.nan:
        problems.append(f"{summary.nan} NaN")
    if summary.inf:
        problems.append(f"{summary.inf} inf")
    if summary.min is not None and summary.min < 0:
        problems.append(f"negative values (min {summary.min:.4g})")
    zero_rows = _zero_rows(ctx, probs.obj)
    if zero_rows:
        problems.append(f"{zero_rows} row(s) summing to 0")
    if not problems:
        return []
    evidence = [ctx.tensor_evidence(probs, "probabilities with " + ", ".join(problems), valid_range="finite, >= 0")]
    return [ctx.cause("multinomial_invalid_probs", 0.9, probs.name, fix, evidence)]


def _zero_rows(ctx: Context, probs: Any) -> int:
    from nb_cudaguard.incident.probe import internal_use

    if not ctx.readable(probs) or not hasattr(probs, "sum") or probs.numel() > 1 << 22:
        return 0
    with internal_use():
        sums = probs.detach().cpu().reshape(-1, probs.shape[-1]).sum(-1) if probs.dim() else probs.detach().cpu()
        return int((sums <= 0).sum())


def _ctc(ctx: Context, call: CallSite) -> list[Cause]:
    names = ("log_probs", "targets", "input_lengths", "target_lengths")
    named = {
        key: ctx.tensor(call.keywords.get(key) or (call.args[i] if len(call.args) > i else None))
        for i, key in enumerate(names)
    }
    log_probs, targets = named["log_probs"], named["targets"]
    input_lengths, target_lengths = named["input_lengths"], named["target_lengths"]
    if log_probs is None or targets is None:
        return []
    shape: Any = getattr(log_probs.obj, "shape", ())
    steps, classes = int(shape[0]), int(shape[-1])
    blank = _blank(ctx, call)
    checks = []
    if input_lengths is not None:
        checks.append((input_lengths, 0, steps + 1, f"{log_probs.name}.shape[0] = {steps} time steps"))
    checks.append((targets, 0, classes, f"{log_probs.name}.shape[-1] = {classes} classes"))
    for tensor, low, high, source in checks:
        found = ctx.outside(tensor.obj, low, high)
        if found is not None and found.count:
            evidence = [range_evidence(ctx, tensor, found, f"[{low}, {high})", source, "CTC")]
            fix = f"{tensor.name} must lie in [{low}, {high}) ({source})."
            return [ctx.cause("ctc_loss", 0.88, tensor.name, fix, evidence)]
    found = ctx.outside(targets.obj, blank, blank + 1)
    if found is not None and found.count < _numel(targets.obj):
        evidence = [ctx.tensor_evidence(targets, f"contains the blank index {blank}")]
        fix = f"Targets must not contain the blank label ({blank}): shift labels to start at {blank + 1}."
        return [ctx.cause("ctc_loss", 0.8, targets.name, fix, evidence)]
    if input_lengths is not None and target_lengths is not None and ctx.readable(target_lengths.obj):
        longer = _longer(ctx, target_lengths.obj, input_lengths.obj)
        if longer:
            evidence = [ctx.tensor_evidence(target_lengths, f"{longer} target(s) longer than their input")]
            fix = "Each target must be no longer than its input sequence: shorten targets or downsample less."
            return [ctx.cause("ctc_loss", 0.8, target_lengths.name, fix, evidence)]
    return []


def _blank(ctx: Context, call: CallSite) -> int:
    if "blank" in call.keywords:
        value = ctx.value(call.keywords["blank"])
        return value if isinstance(value, int) else 0
    module = ctx.call_target(call)
    value = getattr(module, "blank", 0)
    return value if isinstance(value, int) else 0


def _longer(ctx: Context, target_lengths: Any, input_lengths: Any) -> int:
    from nb_cudaguard.incident.probe import internal_use

    if not ctx.readable(input_lengths) or target_lengths.shape != input_lengths.shape:
        return 0
    with internal_use():
        return int((target_lengths.cpu() > input_lengths.cpu()).sum())


def _numel(obj: Any) -> int:
    return int(obj.size if not callable(obj.size) else obj.numel())


def _rank(obj: object) -> int:
    return len(getattr(obj, "shape", ()))


def _dtype(ctx: Context, call: CallSite, kind: str) -> list[Cause]:
    if kind == "embedding":
        named = ctx.tensor(call.args[0] if call.args else None)
        role, fix = "embedding ids", "Ids must be integers: pass ids.long()."
    else:
        prediction, named = _pair(ctx, call)
        if named is None:
            return []
        if prediction is None:  # an inline model call (``criterion(model(xb), yb)``): the error text must say dtype
            if "dtype" not in ctx.expected_groups or _rank(named.obj) != 1:
                return []
        elif _rank(named.obj) != _rank(prediction.obj) - 1:
            return []  # same rank: probability targets, which are allowed to be float
        role, fix = "class-index targets", f"Class-index targets must be int64: pass {named.name}.long()."
    if named is None or not is_floating(named.obj):
        return []
    evidence = [ctx.tensor_evidence(named, f"{role} with a floating dtype", valid_range="int64 (Long)")]
    return [ctx.cause("dtype_mismatch", 0.85, named.name, fix, evidence)]
