"""Sites: where a fast check ran (op, argument, the user's line and variable), as the small integer the board keeps.

The board on the device holds only a number, so everything the error will say about the place is kept here, on
the host, when the op is dispatched. A site is one (the user's line in the running cell, the line deeper in their
code that called the op, check): every call walks the user's frames up to the running cell (one dict lookup per
frame, about 1 us), and the first call along a path pays for the lines' texts, the frames the error will show and
the variable's name (an identity scan of the user's scopes from the cell inward, as the exact mode does after a
failure, without reading values); every later call along it is one more dict lookup. Site numbers are never reused
within a process, because a compiled graph keeps the number it was traced with.

Under ``torch.compile`` there is no Python frame to look at when the graph runs, so the site is made while Dynamo
traces (:func:`compiled_site`, which Dynamo calls once and treats as a constant), from the user frame Dynamo is
tracing; the variable is then unknown.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from traceback import FrameSummary
from types import FrameType

import torch

from nb_cudaguard.check.context import CodeFacts, Known, Names, UserPath, code_facts, user_path, user_spots
from nb_cudaguard.check.fast.board import MAX_SITES
from nb_cudaguard.check.naming import loaded_from, user_name
from nb_cudaguard.incident.usercode import is_user_file, users_line


@dataclass
class Site:
    """One place a fast check runs: what the error needs, recorded when the op was dispatched."""

    number: int
    op: str
    argument: str
    family: str
    valid_range: str
    range_source: str | None
    fix: str | None
    user_line: str | None
    variable: str | None
    shape: tuple[int, ...] | None = None  # of the checked tensor at the last call (positions are flat on device)
    shape_varied: bool = False
    compiled: bool = False
    kind: str = "float"  # of the checked tensor's values: "int", "bool" or "float", to show the value as it was
    via: str | None = None  # where deeper in the user's code the op was called, when not on the user's line
    frames: list[FrameSummary] = field(default_factory=list)  # the user's, from the running cell inward


@dataclass(frozen=True)
class Rule:
    """The static half of a site: what is checked and why, known before any call."""

    op: str
    argument: str
    family: str
    valid_range: str
    range_source: str | None = None
    fix: str | None = None


class Sites:
    """Site numbers by place; the namespace (the user's globals) names their tensors."""

    def __init__(self) -> None:
        self.by_number: dict[int, Site] = {}
        self._by_place: dict[tuple, Site] = {}
        self._by_path: dict[tuple, Site] = {}  # (the user's frames as (code, line), check) -> its site
        self._known: Known = {}
        self._described: dict[tuple, tuple[str | None, str, str | None]] = {}  # the same code run again: its names
        self.namespace: dict | None = None

    def user_frame(self, frame: FrameType | None) -> FrameType | None:
        """The innermost user frame above ``frame``; whether a code object is the user's is decided once."""
        while frame is not None:
            if code_facts(frame.f_code, self._known).user:
                return frame
            frame = frame.f_back
        return None

    def here(
        self,
        place: tuple,
        tensor,
        refine: Callable[[Site, Names], None] | None = None,
        fix: str | None = None,
        make_rule: Callable[[], Rule] | None = None,
    ) -> int:
        """The site of the calling entry point's caller's user line (eager only: it reads Python frames).
        ``place`` identifies the check: ``(op, argument, family, valid, source)``, ``valid`` as ``site_of`` takes
        it (or anything, with ``make_rule``); the rule is only made for a new site. The same line of a
        ``forward()`` reached from another line of the running cell is another site: the user's line differs.
        Every call walks the user's frames up to the running cell (``user_spots``); a path seen before is one dict
        lookup."""
        key = (user_spots(sys._getframe(2), self._known), place)
        site = self._by_path.get(key)
        if site is None:
            caller = sys._getframe(2)
            path = user_path(caller, self._known)
            rule = make_rule() if make_rule is not None else _rule(place, fix)
            site = self._by_path[key] = self._site(path, place, rule, tensor, refine, caller)
        else:
            shape = tensor.shape
            if site.shape != shape:
                site.shape, site.shape_varied = shape, True
        return site.number

    def _site(
        self,
        path: UserPath,
        place: tuple,
        rule: Rule,
        tensor,
        refine: Callable[[Site, Names], None] | None,
        caller: FrameType,
    ) -> Site:
        """The site of a path not seen before: one per (the user's line, where it failed, check). ``caller``: the
        entry point's caller, where a library's loop over the user's data may be (``naming.loaded_from``)."""
        found = users_line(path.facts)
        line, inner = (path.spots[found[0]], path.spots[found[1]]) if found is not None else ((None, 0), (None, 0))
        key = (*inner, *line, place)
        site = self._by_place.get(key)
        if site is not None:
            return site
        user_line, via = path.where()
        site = self._new(rule, key, user_line)
        site.via, site.frames = via, path.summaries()
        names = Names(path.frames[found[1]] if found is not None else None, self.namespace)
        spots = zip(path.facts, path.spots, strict=True)
        same = (tuple((_same_code(facts), spot[1]) for facts, spot in spots), place)
        described = self._described.get(same)
        if described is not None and _still_named(described[0], tensor, path, self.namespace):
            site.variable, site.family, site.range_source = described
        else:
            site.variable = user_name(names, tensor, read_values=False)
            if site.variable is None and found is not None:
                site.variable = loaded_from(caller, names, path.frames[found[0]])
            if refine is not None:
                refine(site, names)
            if len(self._described) >= _DESCRIBED:
                self._described.clear()
            self._described[same] = (site.variable, site.family, site.range_source)
        site.shape = tensor.shape
        site.kind = _kind(tensor)
        return site

    def compiled(self, rule: Rule) -> int:
        """The site of the user line Dynamo is tracing now (called at trace time only)."""
        line = None
        context = torch._guards.TracingContext.try_get()
        if context is not None:
            for summary in reversed(context.extract_stack()):
                if is_user_file(summary.filename):
                    text = (summary.line or "").strip()
                    line = f"{summary.filename}, line {summary.lineno}" + (f": {text}" if text else "")
                    line += " (compiled)"
                    break
        key = ("compiled", line, rule)
        site = self._by_place.get(key) or self._new(rule, key, line)
        site.compiled = True
        return site.number

    def _new(self, rule: Rule, key: tuple, user_line: str | None) -> Site:
        number = min(len(self.by_number) + 1, MAX_SITES)
        site = Site(
            number=number,
            op=rule.op,
            argument=rule.argument,
            family=rule.family,
            valid_range=rule.valid_range,
            range_source=rule.range_source,
            fix=rule.fix,
            user_line=user_line,
            variable=None,
        )
        if number < MAX_SITES or number not in self.by_number:
            self.by_number[number] = site
            self._by_place[key] = site
        return self.by_number[number]


SITES = Sites()


_DESCRIBED = 4096  # descriptions kept for code run again


def _same_code(facts: CodeFacts) -> tuple:
    """What a cell run again has in common with its last run (its code object is new, its file is named after
    the new execution): the code itself, less the file's name."""
    code = facts.code
    name = getattr(code, "co_qualname", code.co_name)  # Python 3.11+
    same = (name, code.co_firstlineno, code.co_code, code.co_names, code.co_consts)
    return same if facts.cell is not None else (code.co_filename, *same)


def _still_named(variable: str | None, tensor, path: UserPath, namespace: dict | None) -> bool:
    """Whether the name found for this code's argument last time still holds this very tensor (a cell run again
    with its variables rebound): then the scan of the user's scopes is not run again."""
    if variable is None or not variable.isidentifier():
        return False
    if namespace is not None and namespace.get(variable) is tensor:
        return True
    return any(f.f_locals.get(variable) is tensor or f.f_globals.get(variable) is tensor for f in path.frames)


def _rule(place: tuple, fix: str | None) -> Rule:
    op, argument, family, valid, source = place
    if isinstance(valid, tuple):
        text = f"[{valid[0]}, {valid[1]})"
        if len(valid) > 2 and valid[2] is not None:
            text += f" or {valid[2]} (ignore_index)"
    else:
        text = valid
    return Rule(op, argument, family, text, source, fix)


def _kind(tensor) -> str:
    if tensor.dtype == torch.bool:
        return "bool"
    return "float" if tensor.is_floating_point() or tensor.is_complex() else "int"


@torch._dynamo.assume_constant_result
def compiled_site(op: str, argument: str, family: str, source: str | None, fix: str | None) -> int:
    """Dynamo runs this once while tracing and bakes the number into the graph: no graph break per check. Only
    constant texts come in (a compiled size may be symbolic), so the range is named by where it comes from."""
    valid = f"within {source}" if source else "the op's valid range"
    return SITES.compiled(Rule(op, argument, family, valid, source, fix))
