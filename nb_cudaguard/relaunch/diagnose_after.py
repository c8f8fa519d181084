"""What "Restart, replay & diagnose" says: the ``%%cudacheck`` error of the failing cell, read by the diagnosis.

The re-run is silent (no history, no hooks), so the extension's post-run hook never builds a report for it. The
check's error alone names the op and the values but not what the workspace can add on the healthy context (an output
layer smaller than the labels, the user's own variable for a tensor built inside the model), so the same diagnosis
the panel uses is run here and its top cause is said under the error.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from typing import Any

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.errors import CudaCheckError


def describe(error: BaseException, namespace: dict[str, Any], journal: Iterable[Any]) -> tuple[str, Diagnosis | None]:
    """The error as said under the replay, and, for a check's error, the diagnosis that pins the report. A check's
    error is said as the panel says a failure (``panel.headline``): the user's values against their range, the fix,
    and the line; never as an exception's raw line."""
    if not isinstance(error, CudaCheckError):
        return "".join(traceback.format_exception_only(type(error), error)).strip(), None
    from nb_cudaguard.diagnosis import diagnose
    from nb_cudaguard.incident.incident import build_incident
    from nb_cudaguard.panel.report import Report

    stopped = f"%%cudacheck stopped {error.op} before it ran: the CUDA context is healthy."
    where = [f"Your line: {error.user_line}"] if error.user_line else []
    try:
        incident = build_incident(error, namespace=namespace)
        diagnosis = diagnose(incident, journal=journal)
    except Exception as exc:  # the check's own words stand without the workspace's
        said = [error.headline(), *([f"Fix: {error.fix}"] if error.fix else [])]
        return "\n".join([*said, *where, stopped, f"(the workspace could not be read for more: {exc})"]), None
    headline = Report(incident, diagnosis).content().headline
    if headline is None:
        said = [error.headline(), *([f"Fix: {error.fix}"] if error.fix else [])]
    else:
        said = [headline.problem, f"Fix: {headline.fix}"]
    return "\n".join([*said, *where, stopped]), diagnosis
