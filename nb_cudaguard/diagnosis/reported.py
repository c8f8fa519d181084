"""What nb_cudaguard reports on, and what it leaves to IPython.

Every GPU session initialises CUDA, so whether CUDA works says nothing about a ``NameError``: the failure itself
must be CUDA's, or a tensor op's rejection of an input that the diagnosis can explain from this session. Anything
else (a typo, a ``KeyError``, a failing import, a shape error nobody can explain) gets no report and no panel, and
leaves the last report as it was.
"""

from __future__ import annotations

import re

from nb_cudaguard.diagnosis.causes import Diagnosis
from nb_cudaguard.errors import CudaCheckError
from nb_cudaguard.incident.catalog import host_side_family
from nb_cudaguard.incident.incident import Incident

# evidence that says nothing about this session's values: how often a family caused such a text in the corpus
_NOT_THIS_SESSION = frozenset({"prior"})


def reported(incident: Incident, diagnosis: Diagnosis) -> bool:
    """A CUDA failure (a CUDA error text, a device assertion, the sticky error, out of memory), a check's error, a
    tensor-index error the catalog knows (the CPU form of the same bad input), or an error whose top cause rests on
    something read in this session about a variable the failing line uses (BERT fed a sequence past
    ``max_position_embeddings`` raises a shape error, on a GPU too); never on the corpus's prior alone."""
    if incident.is_cuda or isinstance(incident.exception, CudaCheckError):
        return True
    if host_side_family(f"{incident.exc_type}: {incident.message}") is not None:
        return True
    top = diagnosis.top
    if top is None or top.variable is None or all(e.kind in _NOT_THIS_SESSION for e in top.evidence):
        return False
    frame = incident.users_line
    line = frame.line if frame is not None else (incident.cell.source if incident.cell is not None else "")
    root = re.match(r"[A-Za-z_]\w*", top.variable)
    return root is not None and re.search(rf"\b{root.group(0)}\b", line) is not None
