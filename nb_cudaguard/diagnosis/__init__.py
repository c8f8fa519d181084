"""Diagnosis: an Incident in, ranked Causes out (see ``engine``); evidence from tensors, the workspace and source."""

from nb_cudaguard.diagnosis.engine import diagnose
from nb_cudaguard.families import summary_of

__all__ = ["diagnose", "summary_of"]
