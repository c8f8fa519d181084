"""Diagnosis: an Incident in, ranked Causes out (see ``engine``); evidence from tensors, the workspace and source."""

from nb_cudaguard.diagnosis.engine import diagnose

__all__ = ["diagnose"]
