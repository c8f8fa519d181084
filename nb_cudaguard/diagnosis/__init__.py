"""Diagnosis: an Incident in, ranked Causes out (see ``engine``); evidence from tensors, the workspace and source."""

from .engine import diagnose
from .evidence.families import summary_of

__all__ = ["diagnose", "summary_of"]
