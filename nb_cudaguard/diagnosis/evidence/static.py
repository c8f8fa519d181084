"""What the user's source says, read with ``ast`` (never run): layer sizes, label counts, losses, added tokens.

Three texts feed it: the failing cell, the earlier cells of the journal, and a file given to
``nb-cudaguard explain LOG --code FILE``. The failing line gets its own, finer reading (``line_facts``): which
function it calls with which arguments, and what it subscripts, so that a cause can name the user's variable.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

_KEYWORDS = (
    "num_labels",
    "num_classes",
    "n_classes",
    "vocab_size",
    "type_vocab_size",
    "max_position_embeddings",
    "ignore_index",
    "num_embeddings",
)
_ADD_TOKENS = ("add_tokens", "add_special_tokens")
_MAGIC = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)


@dataclass
class Fact:
    """One thing the source says, with the line that says it."""

    value: object
    line: str
    target: str | None = None  # the name it was assigned to, when there is one


@dataclass
class StaticFacts:
    linears: list[Fact] = field(default_factory=list)  # value: (in_features, out_features)
    embeddings: list[Fact] = field(default_factory=list)  # value: (num_embeddings, dim)
    keywords: dict[str, list[Fact]] = field(default_factory=dict)
    assigned_ints: dict[str, Fact] = field(default_factory=dict)
    bce_losses: list[Fact] = field(default_factory=list)
    added_tokens: list[Fact] = field(default_factory=list)
    resized: list[Fact] = field(default_factory=list)
    sigmoid: list[Fact] = field(default_factory=list)
    calls: dict[str, list[Fact]] = field(default_factory=dict)  # function name -> calls
    pretrained: list[Fact] = field(default_factory=list)  # checkpoint names given to from_pretrained
    passed_keywords: dict[str, list[Fact]] = field(default_factory=dict)  # keyword name -> calls passing it

    def keyword(self, key: str) -> Fact | None:
        facts = self.keywords.get(key)
        return facts[-1] if facts else None

    def called(self, *names: str) -> list[Fact]:
        return [fact for name in names for fact in self.calls.get(name, [])]


def call_name(node: ast.Call) -> str:
    """``Linear`` for ``nn.Linear(...)`` and ``Linear(...)``; "" for a call of anything else."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return -inner if inner is not None else None
    return None


def call_argument(node: ast.Call, index: int, keyword: str) -> ast.expr | None:
    """The argument given by ``keyword``, else the ``index``-th positional one."""
    for kw in node.keywords:
        if kw.arg == keyword:
            return kw.value
    return node.args[index] if len(node.args) > index else None


def _source_line(lines: list[str], node: ast.AST) -> str:
    number = getattr(node, "lineno", 0)
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def parse_source(source: str) -> ast.AST | None:
    """A cell, a script or a snippet pasted from a function body (indented as a whole)."""
    source = textwrap.dedent(source)
    try:
        return ast.parse(source)
    except SyntaxError:
        try:  # IPython magics and shell escapes in a raw cell
            return ast.parse(_MAGIC.sub(r"\1pass", source))  # at its own indentation
        except SyntaxError:
            return None


def read_sources(sources: Iterable[str]) -> StaticFacts:
    facts = StaticFacts()
    for source in sources:
        if source:
            _read(source, facts)
    return facts


def _read(source: str, facts: StaticFacts) -> None:
    tree = parse_source(source)
    if tree is None:
        return
    lines = textwrap.dedent(source).splitlines()
    targets: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = ast.unparse(node.targets[0])
            targets[id(node.value)] = name
            value = _int(node.value)
            if value is not None and isinstance(node.targets[0], ast.Name):
                facts.assigned_ints[name] = Fact(value, _source_line(lines, node), name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        line = _source_line(lines, node)
        target = targets.get(id(node))
        facts.calls.setdefault(name, []).append(Fact(node, line, target))
        if name == "Linear":
            size_in, size_out = (
                _int(call_argument(node, 0, "in_features")),
                _int(call_argument(node, 1, "out_features")),
            )
            facts.linears.append(Fact((size_in, size_out), line, target))
        elif name == "Embedding":
            count, dim = _int(call_argument(node, 0, "num_embeddings")), _int(call_argument(node, 1, "embedding_dim"))
            facts.embeddings.append(Fact((count, dim), line, target))
        elif name in ("BCELoss", "binary_cross_entropy"):
            facts.bce_losses.append(Fact(name, line, target))
        elif name in _ADD_TOKENS:
            facts.added_tokens.append(Fact(name, line, target))
        elif name == "resize_token_embeddings":
            facts.resized.append(Fact(name, line, target))
        elif name in ("sigmoid", "Sigmoid", "softmax", "Softmax"):
            facts.sigmoid.append(Fact(name, line, target))
        if name == "from_pretrained" and node.args and isinstance(node.args[0], ast.Constant):
            facts.pretrained.append(Fact(str(node.args[0].value), line, target))
        for kw in node.keywords:
            if kw.arg:
                facts.passed_keywords.setdefault(kw.arg, []).append(Fact(ast.unparse(kw.value), line, target))
            if kw.arg in _KEYWORDS:
                value = _int(kw.value)
                if value is not None:
                    facts.keywords.setdefault(kw.arg, []).append(Fact(value, line, target))


@dataclass
class CallSite:
    """A call in the failing line: ``criterion(logits, labels)`` -> name "criterion", args ["logits", "labels"]."""

    name: str
    receiver: str | None
    args: list[str]
    keywords: dict[str, str]
    int_args: list[int | None]


@dataclass
class Subscript:
    base: str
    index: str
    constant: int | None


@dataclass
class LineFacts:
    text: str = ""
    calls: list[CallSite] = field(default_factory=list)
    subscripts: list[Subscript] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def calls_named(self, *words: str) -> list[CallSite]:
        found = []
        for call in self.calls:
            label = f"{call.receiver or ''}.{call.name}".lower()
            if any(word in label for word in words):
                found.append(call)
        return found


def line_facts(text: str) -> LineFacts:
    """The failing line's calls and subscripts. A line that does not parse alone (a continuation) yields names only."""
    facts = LineFacts(text=text.strip())
    stripped = text.strip().rstrip(":")
    if stripped.startswith(("return ", "yield ")):
        stripped = stripped.split(" ", 1)[1]
    tree = None
    for candidate in (stripped, stripped + ")", stripped + "))"):
        try:
            tree = ast.parse(candidate)
            break
        except SyntaxError:
            continue
    if tree is None:
        facts.names = re.findall(r"[A-Za-z_][\w.]*", stripped)
        return facts
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else None
            facts.calls.append(
                CallSite(
                    name=call_name(node),
                    receiver=receiver,
                    args=[ast.unparse(a) for a in node.args],
                    keywords={kw.arg: ast.unparse(kw.value) for kw in node.keywords if kw.arg},
                    int_args=[_int(a) for a in node.args],
                )
            )
        elif isinstance(node, ast.Subscript):
            index = node.slice
            facts.subscripts.append(Subscript(ast.unparse(node.value), ast.unparse(index), _int(index)))
        elif isinstance(node, ast.Name) and node.id not in facts.names:
            facts.names.append(node.id)
    return facts
