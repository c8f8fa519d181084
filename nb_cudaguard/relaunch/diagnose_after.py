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
    """The error as said under the replay, and, for a check's error, the diagnosis that pins the report."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    if not isinstance(error, CudaCheckError):
        return text, None
    from nb_cudaguard.diagnosis import diagnose
    from nb_cudaguard.incident.incident import build_incident

    try:
        diagnosis = diagnose(build_incident(error, namespace=namespace), journal=journal)
    except Exception as exc:  # the check's own words stand without the workspace's
        return f"{text}\n(the workspace could not be read for more: {type(exc).__name__}: {exc})", None
    top = diagnosis.top
    if top is None:
        return text, diagnosis
    variable = f" in {top.variable}" if top.variable else ""
    return f"{text}\nLikely cause: {top.summary}{variable} ({top.family}).\nFix: {top.fix}", diagnosis
