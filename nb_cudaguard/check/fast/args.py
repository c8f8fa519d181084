"""What every fast entry point needs: its arguments by position or keyword, the site of the call, and the few
violations that are known on the host without reading the device (a list of lengths, a class-weight vector of the
wrong size), which are raised at once, like the exact mode does: nothing has run yet and nothing needs a sync.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from nb_cudaguard.check.context import Names, user_path
from nb_cudaguard.check.fast.rules import compiling
from nb_cudaguard.check.fast.sites import SITES, Site, compiled_site
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.families import check_fix_of

Args = tuple[tuple, dict]


def arg(args: tuple, kwargs: dict, position: int, name: str, default: Any = None) -> Any:
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def with_arg(args: tuple, kwargs: dict, position: int, name: str, value: Any) -> Args:
    if len(args) > position:
        return (*args[:position], value, *args[position + 1 :]), kwargs
    return args, {**kwargs, name: value}


def site_of(
    op: str,
    argument: str,
    family: str,
    tensor,
    valid: tuple | str,
    source: str | None,
    fix: str | None = None,
    refine: Callable[[Site, Names], None] | None = None,
) -> int:
    """The site number of this call. ``valid`` is ``(low, high)`` for ``[low, high)``, ``(low, high, ignore)`` for
    that or an ignore_index, or a text; it is formatted in eager mode only and once per site, so that a compiled
    graph never formats a (possibly symbolic) size and a repeated call formats nothing."""
    if compiling():
        return compiled_site(op, argument, family, source, fix)
    return SITES.here((op, argument, family, valid, source), tensor, refine, fix)


def host_violation(
    op: str,
    argument: str,
    family: str,
    tensor,
    problem: str,
    valid: str,
    source: str | None,
    *,
    values: list | None = None,
    positions: list | None = None,
    count: int | None = None,
    fix: str | None = None,
) -> CudaCheckError:
    """An error for a violation the host already knows: raised before the op runs, as in the exact mode."""
    frame = SITES.user_frame(sys._getframe(1))
    user_line, via = user_path(frame).where()
    return CudaCheckError(
        op=op,
        argument=argument,
        family=family,
        problem=problem,
        values=values,
        positions=positions,
        count=count,
        valid_range=valid,
        range_source=source,
        variable=Names(frame, SITES.namespace).name_of(tensor),
        user_line=user_line,
        via=via,
        fix=fix or check_fix_of(family),
    )
