"""Class-index losses (cross-entropy, NLL): which labels are out of range, and whether the labels or the model is wrong.

Three families hide behind ``t >= 0 && t < n_classes``: a stray label value (``label_out_of_range``), a negative
label that is not the loss's ``ignore_index`` (``negative_label``), and a model with fewer outputs than the data
has classes (``num_classes_mismatch``: labels 0..K-1 are all plausible, the layer is too small). The number of
classes comes from the logits' shape where we can see it, else the model's last linear layer, its config, or
the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.context import Context, nan_cause, range_evidence
from nb_cudaguard.diagnosis.evidence.workspace import Named, config_value
from nb_cudaguard.diagnosis.evidence.written import outputs_written
from nb_cudaguard.diagnosis.tensors import INT64_MIN, is_floating, is_integral
from nb_cudaguard.families import fix_of

_LOSS_WORDS = ("loss", "criterion", "cross_entropy", "nll", "ce")
_LABEL_WORDS = ("label", "target", "tag", "class", "gt")
_HEAD_WORDS = ("classifier", "fc", "head", "out", "cls", "final", "logit", "score", "pred")
DEFAULT_IGNORE_INDEX = -100


@dataclass
class ClassCount:
    value: int
    source: str
    evidence: Evidence


@dataclass
class LossCall:
    logits: Named | None
    target: Named
    module: object | None


def _loss_calls(ctx: Context) -> list[LossCall]:
    found = []
    for call in ctx.line.calls:
        target_obj = ctx.call_target(call)
        label = f"{call.receiver or ''}.{call.name}".lower()
        is_loss_module = type(target_obj).__name__.endswith("Loss") if target_obj is not None else False
        if "labels" in call.keywords:  # a Hugging Face style model(..., labels=labels)
            target = ctx.tensor(call.keywords["labels"])
            if target is not None:
                found.append(LossCall(None, target, target_obj))
            continue
        if not (is_loss_module or any(w in label for w in _LOSS_WORDS)) or "bce" in label or "binary" in label:
            continue
        if isinstance(target_obj, object) and type(target_obj).__name__.startswith("BCE"):
            continue
        logits = ctx.tensor(call.keywords.get("input") or (call.args[0] if call.args else None))
        target = ctx.tensor(call.keywords.get("target") or (call.args[1] if len(call.args) > 1 else None))
        if target is not None:
            found.append(LossCall(logits, target, target_obj if is_loss_module else None))
    return found


def _guess_calls(ctx: Context) -> list[LossCall]:
    """No loss call in the failing line (an innocent line, or a log): label-named integer tensors."""
    calls = []
    for named in ctx.workspace.tensors:
        last = named.name.rsplit(".", 1)[-1].lower().strip("[]'\"")
        if (any(w in last for w in _LABEL_WORDS) or last in ("y", "yb", "y_batch", "y_train")) and is_integral(
            named.obj
        ):
            calls.append(LossCall(None, named, None))
    return calls[:6]


def _class_counts(ctx: Context, call: LossCall) -> list[ClassCount]:
    counts: list[ClassCount] = []
    logits: Any = call.logits.obj if call.logits is not None else None
    if call.logits is not None and len(logits.shape) >= 2:
        size = int(logits.shape[1])
        source = f"{call.logits.name}.shape[1]"
        counts.append(ClassCount(size, source, Evidence("tensor", f"{source} = {size}", variable=call.logits.name)))
    model = call.module if call.module is not None and hasattr(call.module, "config") else None
    for config_named in ctx.workspace.configs:
        if model is not None and config_named.obj is not getattr(model, "config", None):
            continue
        value = config_value(config_named.obj, "num_labels")
        if value is not None:
            source = f"{config_named.name}.num_labels"
            counts.append(ClassCount(value, source, Evidence("config", f"{source} = {value}")))
            break
    head = _head(ctx)
    if head is not None:
        source = f"{head.name}.out_features"
        value = int(cast(Any, head.obj).out_features)
        counts.append(ClassCount(value, source, Evidence("module", f"{source} = {value} ({head.obj!r})")))
    for key in ("num_labels", "num_classes", "n_classes"):
        fact = ctx.static.keyword(key)
        if fact is not None:
            counts.append(
                ClassCount(cast(int, fact.value), f"`{fact.line}`", _source(f"{key}={fact.value}", fact.line))
            )
    if ctx.static.linears:
        fact = ctx.static.linears[-1]
        outputs = cast(tuple[Any, Any], fact.value)[1]
        if outputs is not None:
            counts.append(
                ClassCount(outputs, f"`{fact.line}`", _source(f"last Linear has {outputs} outputs", fact.line))
            )
    return counts


def _source(text: str, line: str) -> Evidence:
    return Evidence("source", f"{text}: `{line}`", direct=False, source_line=line)


def _head(ctx: Context) -> Named | None:
    linears = ctx.workspace.linears
    if not linears:
        return None
    named = [lin for lin in linears if any(w in lin.name.rsplit(".", 1)[-1].lower() for w in _HEAD_WORDS)]
    return (named or linears)[-1]


def _ignore_index(ctx: Context, call: LossCall) -> tuple[int, str]:
    modules = [call.module] if call.module is not None else [m.obj for m in ctx.workspace.losses]
    for module in modules:
        value = getattr(module, "ignore_index", None)
        if isinstance(value, int):
            return value, f"{ctx.workspace.name_of(module) or 'the loss'}.ignore_index"
    fact = ctx.static.keyword("ignore_index")
    if fact is not None:
        return cast(int, fact.value), f"`{fact.line}`"
    return DEFAULT_IGNORE_INDEX, "the default ignore_index"


def _data_classes(ctx: Context) -> tuple[int, Evidence] | None:
    """How many classes the data says it has: a ``num_classes = 196`` in the namespace or the source."""
    for name, value in ctx.workspace.counts.items():
        if "class" in name.lower() or "label" in name.lower():
            return value, Evidence("source", f"`{name} = {value}` in the namespace", direct=True, variable=name)
    for name, fact in ctx.static.assigned_ints.items():
        if "class" in name.lower() or "label" in name.lower():
            return cast(int, fact.value), _source(f"{name} = {fact.value}", fact.line)
    return None


def analyse(ctx: Context) -> list[Cause]:
    calls = _loss_calls(ctx)
    if not calls and (not ctx.expected_groups or "class_index" in ctx.expected_groups):
        calls = _guess_calls(ctx)  # label-named tensors, only when nothing points elsewhere
    causes = []
    for call in calls:
        if is_floating(call.target.obj):
            continue  # soft targets or a dtype problem, not a class index
        cause = _explain_target(ctx, call)
        if cause is not None:
            causes.append(cause)
    return causes


def _explain_target(ctx: Context, call: LossCall) -> Cause | None:
    counts = _class_counts(ctx, call)
    ignore, ignore_source = _ignore_index(ctx, call)
    target = call.target
    n = counts[0].value if counts else None
    found, used = ctx.values_outside(target, 0, n, ignore=ignore)
    if found is None:  # neither the labels nor the host object they were built from: a dataset's labels
        for copy in ctx.workspace.label_sources:
            found = ctx.outside(copy.obj, 0, n, ignore=ignore)
            if found is not None:
                used = copy
                break
    if found is None:
        return _without_values(ctx, call, counts)
    if not found.count:
        return None
    summary = ctx.summary(used.obj)
    valid = f"[0, {n})" if n is not None else "[0, n_classes)"
    source = counts[0].source if counts else "the number of classes"
    why = f"ignore_index={ignore} ({ignore_source})"
    evidence = [range_evidence(ctx, target, found, valid, source, why, used if used is not target else None)]
    if INT64_MIN in found.values:
        return nan_cause(ctx, target, evidence)
    evidence += [c.evidence for c in counts]
    negatives = [v for v in found.values if v < 0]
    name = target.name
    if negatives and len(negatives) == len(found.values):
        fix = (
            f"Labels must be in {valid}; the negative ones ({', '.join(map(str, negatives[:3]))}) are not the loss's "
            f"ignore_index ({ignore}). Either map them to {ignore}, or pass ignore_index={negatives[0]} "
            f"(e.g. nn.CrossEntropyLoss(ignore_index={negatives[0]}))."
        )
        return ctx.cause("negative_label", 0.85, name, fix, evidence)
    if n is None:
        return ctx.cause("label_out_of_range", 0.6, name, fix_of("label_out_of_range"), evidence)
    lowest, highest = summary.min, summary.max
    if highest is None:  # an integer summary always has both; a float target never gets here
        return ctx.cause("label_out_of_range", 0.6, name, fix_of("label_out_of_range"), evidence)
    highest = int(highest)
    data = _data_classes(ctx)
    classes_in_data = summary.distinct_count if summary.distinct_count is not None else 0
    if data is not None:
        evidence.append(data[1])
    wanted = max(highest + 1, data[0] if data else 0)
    contiguous = lowest == 0 and classes_in_data == highest + 1
    if lowest == 1 and highest == n and not (data and data[0] > n):
        fix = f"The labels run from 1 to {n}: they look 1-based. Subtract 1 ({name} - 1) so they run from 0 to {n - 1}."
        return ctx.cause("label_out_of_range", 0.85, name, fix, evidence)
    if (data is not None and data[0] > n) or (contiguous and highest < 2 * n):
        return ctx.cause("num_classes_mismatch", 0.88, name, _resize_fix(ctx, counts, wanted), evidence)
    if highest == n and lowest is not None and lowest > 1:
        # One past the end, and a batch that happens to lack class 0: one class more than the head has, most often.
        fix = _resize_fix(ctx, counts, n + 1) + f" (If the labels are 1-based instead, subtract 1: {name} - 1.)"
        return ctx.cause("num_classes_mismatch", 0.7, name, fix, evidence)
    fix = (
        f"Labels must be in {valid}; {found.describe(name)} are not. Remap them to class ids, or mark them with "
        f"ignore_index ({ignore}) if they mean 'no label' (e.g. 255 in segmentation masks)."
    )
    return ctx.cause("label_out_of_range", 0.85, name, fix, evidence)


def _resize_fix(ctx: Context, counts: list[ClassCount], wanted: int) -> str:
    head = _head(ctx)
    if any(c.source.endswith(".num_labels") or "num_labels" in c.source for c in counts):
        return f"The data has {wanted} classes: build the model with num_labels={wanted}."
    if head is not None:
        layer: Any = head.obj
        data = _data_classes(ctx)
        named = data[1].variable if data is not None and data[0] == wanted else None
        written = outputs_written(ctx, head, wanted, named)
        do = str(written) if written is not None else f"use nn.Linear({layer.in_features}, {wanted})"
        return f"The data has {wanted} classes but {head.name} has {layer.out_features} outputs: {do}."
    linear = ctx.static.linears[-1] if ctx.static.linears else None
    inputs = cast(tuple[Any, Any], linear.value)[0] if linear is not None else None
    if inputs is not None:
        return f"The data has {wanted} classes: use nn.Linear({inputs}, {wanted}) as the last layer."
    return f"The data has {wanted} classes: give the output layer {wanted} units."


def _without_values(ctx: Context, call: LossCall, counts: list[ClassCount]) -> Cause | None:
    """Poisoned and no CPU copy: shapes and the source are all we have, and we say so."""
    target = call.target
    reason = ctx.summary(target.obj).why_not
    evidence = [ctx.tensor_evidence(target, "the labels fed to the loss", direct=False)]
    evidence += [c.evidence for c in counts]
    data = _data_classes(ctx)
    n = counts[0].value if counts else None
    if data is not None and n is not None and data[0] > n:
        evidence.append(data[1])
        return ctx.cause("num_classes_mismatch", 0.65, target.name, _resize_fix(ctx, counts, data[0]), evidence)
    fix = f"Check that every value of {target.name} lies in [0, {n if n is not None else 'n_classes'}) ({reason})."
    return ctx.cause("label_out_of_range", 0.45, target.name, fix, evidence)
