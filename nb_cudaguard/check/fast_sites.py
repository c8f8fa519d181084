"""Sites: where a fast check ran (op, argument, the user's line and variable), as the small integer the board keeps.

The board on the device holds only a number, so everything the error will say about the place is kept here, on
the host, when the op is dispatched. A site is one (user code, line, entry point, argument): the first call from a
line pays for finding the user's frame, the line's text and the variable's name (one identity scan of the frame's
scopes, as the exact mode does after a failure); every later call from that line is one dict lookup. Site numbers
are never reused within a process, because a compiled graph keeps the number it was traced with.

Under ``torch.compile`` there is no Python frame to look at when the graph runs, so the site is made while Dynamo
traces (:func:`compiled_site`, which Dynamo calls once and treats as a constant), from the user frame Dynamo is
tracing; the variable is then unknown.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType

import torch

from nb_cudaguard.check.context import Names, describe_line
from nb_cudaguard.check.fast_board import MAX_SITES
from nb_cudaguard.incident.usercode import is_user_file


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
        self._user_code: dict[CodeType, bool] = {}
        self.namespace: dict | None = None

    def user_frame(self, frame: FrameType | None) -> FrameType | None:
        """The innermost user frame above ``frame``; whether a code object is the user's is decided once."""
        known = self._user_code
        while frame is not None:
            code = frame.f_code
            mine = known.get(code)
            if mine is None:
                mine = known[code] = is_user_file(code.co_filename)
            if mine:
                return frame
            frame = frame.f_back
        return None

    def here(
        self,
        place: tuple,
        make_rule: Callable[[], Rule],
        tensor,
        refine: Callable[[Site, Names], None] | None = None,
    ) -> int:
        """The site of the calling entry point's caller's user line (eager only: it reads Python frames).
        ``place`` identifies the check (op, argument, range); the rule is only made for a new site."""
        frame = self.user_frame(sys._getframe(2))
        key = (frame.f_code if frame is not None else None, frame.f_lineno if frame is not None else 0, place)
        site = self._by_place.get(key)
        shape = tensor.shape
        if site is None:
            site = self._new(make_rule(), key, describe_line(frame))
            names = Names(frame, self.namespace)
            site.variable = names.name_of(tensor)
            if refine is not None:
                refine(site, names)
            site.shape = shape
            site.kind = _kind(tensor)
        elif site.shape != shape:
            site.shape, site.shape_varied = shape, True
        return site.number

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
