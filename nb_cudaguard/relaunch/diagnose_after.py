"""What "Restart, replay & diagnose" says: the ``%%cudacheck`` error of the failing cell, read by the diagnosis.

The re-run is silent (no history, no hooks), so the extension's post-run hook never builds a report for it. The
check's error alone names the op and the values but not what the workspace can add on the healthy context (an output
layer smaller than the labels, the user's own variable for a tensor built inside the model), so the same diagnosis
the panel uses is run here, and the report pinned from it says what is wrong and the fix, as the panel does.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from typing import Any

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.errors import CudaCheckError


def describe(
    error: BaseException, namespace: dict[str, Any], journal: Iterable[Any], pin: Callable[[Diagnosis], str | None]
) -> str:
    """The error as said under the replay. A check's error is diagnosed and the diagnosis pinned as the session's
    report (``pin``, ``CudaGuard.pin_report``), which says it as the panel says a failure: the user's values against
    their range, and the fix; then the line. Never an exception's raw line."""
    if not isinstance(error, CudaCheckError):
        return "".join(traceback.format_exception_only(type(error), error)).strip()
    from nb_cudaguard.diagnosis import diagnose
    from nb_cudaguard.incident.incident import build_incident

    said = [error.headline(), *([f"Fix: {error.fix}"] if error.fix else [])]  # the check's own words, if need be
    after = [*([f"Your line: {error.user_line}"] if error.user_line else [])]
    after.append(f"%%cudacheck stopped {error.op} before it ran: the CUDA context is healthy.")
    try:
        diagnosis = diagnose(build_incident(error, namespace=namespace), journal=journal)
    except Exception as exc:  # the check's own words stand without the workspace's
        return "\n".join([*said, *after, f"(the workspace could not be read for more: {exc})"])
    try:
        headline = pin(diagnosis)
    except Exception as exc:  # the replay's outcome still says what the check found
        after.append(f"(the report could not be pinned: {type(exc).__name__}: {exc})")
    else:
        said = headline.splitlines() if headline else said
    return "\n".join([*said, *after])
