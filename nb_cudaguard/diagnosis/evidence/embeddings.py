"""Embedding look-ups: which table overflowed, and why (tokenizer grown, sequence too long, token types, bad ids).

``srcIndex < srcSelectDimSize`` (or ``index out of range in self`` on CPU) only says some id was too large for
some table. A transformer has three tables, so we check each against the tensors that feed it: the token ids
against the word embeddings (and the tokenizer's length, for added tokens), the sequence lengths against the
position embeddings (a shape check: it works even when the values cannot be read), and ``token_type_ids``
against ``type_vocab_size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from nb_cudaguard.diagnosis.causes import Cause, Evidence
from nb_cudaguard.diagnosis.evidence.context import Context, nan_cause, range_evidence
from nb_cudaguard.diagnosis.evidence.workspace import Named, config_value
from nb_cudaguard.diagnosis.tensors import INT64_MIN, is_floating, is_integral

_POSITION = ("position", "pos_emb", "embed_positions", "wpe")
_TOKEN_TYPE = ("token_type", "segment", "seg_emb")
_TYPE_IDS = ("token_type", "segment", "seg_ids", "type_ids")
_POSITION_IDS = ("position_ids", "pos_ids")
_SEQUENCE_NAMES = ("input_ids", "ids", "tokens", "token", "labels", "decoder", "src", "tgt", "input")


@dataclass
class Table:
    """An embedding table's size, and where that size was read."""

    size: int
    source: str
    evidence: Evidence
    module: Named | None = None
    offset: int = 0


def _role(name: str) -> str:
    last = name.lower()
    if any(w in last for w in _TOKEN_TYPE):
        return "token_type"
    if any(w in last for w in _POSITION):
        return "position"
    return "word"


def _tables(ctx: Context) -> dict[str, Table]:
    tables: dict[str, Table] = {}
    for named in ctx.workspace.embeddings:
        role = _role(named.name)
        if role in tables:
            continue
        size = int(cast(Any, named.obj).num_embeddings)
        offset = getattr(named.obj, "offset", 0)
        offset = offset if isinstance(offset, int) else 0
        text = f"{named.name} = Embedding({size}, {getattr(named.obj, 'embedding_dim', '?')})"
        tables[role] = Table(size, f"{named.name}.num_embeddings", Evidence("module", text), named, offset)
    keys = {"word": "vocab_size", "position": "max_position_embeddings", "token_type": "type_vocab_size"}
    for role, key in keys.items():
        if role in tables:
            continue
        for config in ctx.workspace.configs:
            value = config_value(config.obj, key)
            if value is not None:
                source = f"{config.name}.{key}"
                tables[role] = Table(value, source, Evidence("config", f"{source} = {value}"))
                break
        else:
            fact = ctx.static.keyword(key)
            if fact is not None:
                ev = Evidence("source", f"{key}={fact.value}: `{fact.line}`", direct=False, source_line=fact.line)
                tables[role] = Table(cast(int, fact.value), f"`{fact.line}`", ev)
    if "word" not in tables and ctx.static.embeddings:
        fact = ctx.static.embeddings[-1]
        rows = cast(tuple[Any, Any], fact.value)[0]
        if rows is not None:
            ev = Evidence("source", f"`{fact.line}`", direct=False, source_line=fact.line)
            tables["word"] = Table(rows, f"`{fact.line}`", ev)
    return tables


def _line_tables(ctx: Context) -> list[tuple[str, Table, Named]]:
    """``emb(ids)`` in the failing line: that table (and its role) and that tensor, whatever their names."""
    found = []
    for call in ctx.line.calls:
        module = ctx.call_target(call)
        if module is None or not hasattr(module, "num_embeddings") or not call.args:
            continue
        ids = ctx.tensor(call.args[0])
        if ids is None:
            continue
        name = ctx.workspace.name_of(module) or call.name
        size = int(module.num_embeddings)
        offset = getattr(module, "offset", 0)
        evidence = Evidence("module", f"{name} = Embedding({size}, {getattr(module, 'embedding_dim', '?')})")
        table = Table(size, f"{name}.num_embeddings", evidence, offset=offset if isinstance(offset, int) else 0)
        found.append((_role(f"{name} {call.receiver or ''}.{call.name}"), table, ids))
    return found


def _id_tensors(ctx: Context) -> list[Named]:
    line_names = set(ctx.line.names)
    found = []
    for named in ctx.workspace.tensors:
        if is_floating(named.obj) or not cast(Any, named.obj).shape:
            continue
        last = named.name.lower()
        if named.name in line_names or any(w in last for w in _SEQUENCE_NAMES + _TYPE_IDS + _POSITION_IDS):
            found.append(named)
    return found


def analyse(ctx: Context) -> list[Cause]:
    tables = _tables(ctx)
    tensors = _id_tensors(ctx)
    type_ids = [t for t in tensors if any(w in t.name.lower() for w in _TYPE_IDS)]
    position_ids = [t for t in tensors if any(w in t.name.lower() for w in _POSITION_IDS)]
    word_ids = [t for t in tensors if t not in type_ids and t not in position_ids]
    for role, table, ids in _line_tables(ctx):  # the failing line names the table: trust it over names
        tables[role] = table
        if role == "token_type" and ids not in type_ids:
            type_ids.insert(0, ids)
        elif role == "position" and ids not in position_ids:
            position_ids.insert(0, ids)
        elif role == "word" and ids not in word_ids:
            word_ids.insert(0, ids)
    causes: list[Cause] = []
    if "token_type" in tables:
        causes += _type_ids(ctx, tables["token_type"], type_ids)
    if "position" in tables:
        causes += _positions(ctx, tables["position"], word_ids, position_ids)
    if "word" in tables:
        causes += _word_ids(ctx, tables["word"], [t for t in word_ids if is_integral(t.obj)])
    if "token_type" not in tables:
        causes += _single_type_checkpoint(ctx)
    if not causes and _added_without_resize(ctx):
        fix = _resize_fix(ctx)
        causes.append(ctx.cause("vocab_resize_missing", 0.6, None, fix, [_added_evidence(ctx)]))
    return causes


# Checkpoints of these families are trained with a single token type (type_vocab_size=1).
_SINGLE_TYPE = ("roberta", "camembert", "longformer", "xlm-r", "phobert", "bertweet")


def _single_type_checkpoint(ctx: Context) -> list[Cause]:
    """No config in reach, but the source loads a RoBERTa-family checkpoint and passes token_type_ids to it."""
    passed = ctx.static.passed_keywords.get("token_type_ids")
    checkpoint = next((f for f in ctx.static.pretrained if any(w in str(f.value).lower() for w in _SINGLE_TYPE)), None)
    if not passed or checkpoint is None:
        return []
    evidence = [
        Evidence(
            "source",
            f"`{checkpoint.line}`: this checkpoint family has type_vocab_size=1",
            direct=False,
            source_line=checkpoint.line,
        ),
        Evidence("source", f"`{passed[-1].line}` passes token_type_ids", direct=False, source_line=passed[-1].line),
    ]
    table = Table(1, f"{checkpoint.value} (type_vocab_size=1)", evidence[0])
    variable = str(passed[-1].value)
    return [ctx.cause("token_type_ids_out_of_range", 0.6, variable, _type_fix(table), evidence)]


def _type_ids(ctx: Context, table: Table, tensors: list[Named]) -> list[Cause]:
    causes = []
    for named in tensors:
        found, read = ctx.values_outside(named, 0, table.size)
        valid = f"[0, {table.size})"
        if found is None:
            if table.size == 1:
                evidence = [ctx.tensor_evidence(named, "token types fed to a model with one type", direct=False)]
                causes.append(ctx.cause("token_type_ids_out_of_range", 0.45, named.name, _type_fix(table), evidence))
            continue
        if found.count:
            why = "the model has only these token types"
            evidence = [range_evidence(ctx, named, found, valid, table.source, why, read), table.evidence]
            causes.append(ctx.cause("token_type_ids_out_of_range", 0.9, named.name, _type_fix(table), evidence))
    return causes


def _type_fix(table: Table) -> str:
    if table.size == 1:
        return (
            "This model has a single token type (type_vocab_size=1, as RoBERTa-style models do): drop token_type_ids "
            "or pass zeros (tokenizer(..., return_token_type_ids=False))."
        )
    return f"token_type_ids must lie in [0, {table.size}) ({table.source})."


def _positions(ctx: Context, table: Table, sequences: list[Named], position_ids: list[Named]) -> list[Cause]:
    limit = table.size - table.offset
    causes = []
    for named in sequences:
        shape = cast(Any, named.obj).shape
        if len(shape) < 2 and "ids" not in named.name.lower():
            continue  # a batch of class labels is not a sequence
        length = int(shape[-1])
        if length <= limit:
            continue
        offset = f" minus its offset {table.offset}" if table.offset else ""
        text = f"sequence length {length} > {limit} positions ({table.source}{offset})"
        evidence = [
            Evidence(
                "tensor",
                f"{named.name}: {ctx.summary(named.obj).to_text()}; {text}",
                variable=named.name,
                values=[length],
                valid_range=f"length <= {limit}",
                range_source=table.source,
                source_line=ctx.source_line,
            ),
            table.evidence,
        ]
        fix = (
            f"{named.name} has {length} positions but the model has {limit}: truncate it "
            f"(tokenizer(..., truncation=True, max_length={limit}) or {named.name}[:, :{limit}])."
        )
        causes.append(ctx.cause("position_ids_too_long", 0.88, named.name, fix, evidence))
    for named in position_ids:
        found, read = ctx.values_outside(named, 0, limit)
        if found is not None and found.count:
            evidence = [
                range_evidence(ctx, named, found, f"[0, {limit})", table.source, "position ids", read),
                table.evidence,
            ]
            fix = f"position_ids must be < {limit}: truncate the sequence to {limit} tokens."
            causes.append(ctx.cause("position_ids_too_long", 0.88, named.name, fix, evidence))
    return causes


def _word_ids(ctx: Context, table: Table, tensors: list[Named]) -> list[Cause]:
    tokenizer = _grown_tokenizer(ctx, table)
    causes = []
    for named in tensors:
        found, read = ctx.values_outside(named, 0, table.size)
        valid = f"[0, {table.size})"
        if found is None:
            if tokenizer is not None:
                evidence = [ctx.tensor_evidence(named, "token ids", direct=False), table.evidence, tokenizer[1]]
                causes.append(ctx.cause("vocab_resize_missing", 0.65, named.name, _resize_fix(ctx), evidence))
            continue
        if not found.count:
            continue
        evidence = [range_evidence(ctx, named, found, valid, table.source, "ids beyond the table", read)]
        if INT64_MIN in found.values:
            causes.append(nan_cause(ctx, named, evidence))
            continue
        evidence.append(table.evidence)
        if tokenizer is not None and all(0 <= v < tokenizer[0] for v in found.values):
            evidence.append(tokenizer[1])
            causes.append(ctx.cause("vocab_resize_missing", 0.92, named.name, _resize_fix(ctx), evidence))
        elif _added_without_resize(ctx) and all(v >= 0 for v in found.values):
            evidence += [_added_evidence(ctx)]
            causes.append(ctx.cause("vocab_resize_missing", 0.8, named.name, _resize_fix(ctx), evidence))
        else:
            biggest = max(found.values)
            fix = (
                f"Every id in {named.name} must lie in {valid} ({table.source}); found {biggest}. Check that the "
                f"tokenizer matches the model, or build the table with nn.Embedding({biggest + 1}, dim)."
                if biggest >= 0
                else f"{named.name} holds negative ids (padding -1 or -100?): map them to a real padding id."
            )
            causes.append(ctx.cause("embedding_index_out_of_range", 0.85, named.name, fix, evidence))
    if not causes and tokenizer is not None and _added_without_resize(ctx):
        evidence = [table.evidence, tokenizer[1], _added_evidence(ctx)]
        causes.append(ctx.cause("vocab_resize_missing", 0.55, None, _resize_fix(ctx), evidence))
    return causes


def _grown_tokenizer(ctx: Context, table: Table) -> tuple[int, Evidence] | None:
    for named in ctx.workspace.tokenizers:
        try:
            length = len(cast(Any, named.obj))
        except Exception:
            continue
        if length > table.size:
            text = f"len({named.name}) = {length} > {table.size} rows in the table ({table.source})"
            return length, Evidence("tokenizer", text, variable=named.name, range_source=table.source)
    return None


def _added_without_resize(ctx: Context) -> bool:
    return bool(ctx.static.added_tokens) and not ctx.static.resized


def _added_evidence(ctx: Context) -> Evidence:
    fact = ctx.static.added_tokens[-1]
    return Evidence(
        "source",
        f"tokens are added (`{fact.line}`) and resize_token_embeddings is never called",
        direct=False,
        source_line=fact.line,
    )


def _resize_fix(ctx: Context) -> str:
    model = ctx.workspace.models[0].name if ctx.workspace.models else "model"
    tokenizer = ctx.workspace.tokenizers[0].name if ctx.workspace.tokenizers else "tokenizer"
    return f"{model}.resize_token_embeddings(len({tokenizer})) after adding the tokens."
