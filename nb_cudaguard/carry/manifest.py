"""The carry manifest: which values were written where before the exec, and how to check them after it.

It travels inside the signed handoff; this module is the one place that writes it (``to_dict``) and reads it
(``from_dict``), so the two processes agree on its shape. ``version`` changes whenever a field changes meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nb_cudaguard.errors import NbCudaguardError

VERSION = 1


class ManifestError(ValueError, NbCudaguardError):
    """A manifest of another version, or one that lacks a field: its values are not used."""


@dataclass(frozen=True)
class CarriedBuffers:
    """A value's arrays, out of band: one file, checked as a whole, and each buffer's span in it."""

    file: str
    sha256: str
    spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class CarriedFile:
    """One carried value: its pickle stream and its SHA-256, and its arrays' buffer file if it has arrays."""

    name: str
    file: str
    sha256: str
    buffers: CarriedBuffers | None = None


@dataclass(frozen=True)
class CarryManifest:
    directory: str
    values: tuple[CarriedFile, ...]
    total_bytes: int
    base_plan: dict[str, Any]  # the plan without carrying: replayed from first_skipped if the values cannot be used
    first_skipped: int  # the journal position of the first cell the carry plan skips
    expected_seconds: float
    # values only a training cell the snapshot replaces left (name -> that cell's position): put in after the
    # replay, and only if that cell was skipped (restored): if it ran after all, what it bound stands
    loose: dict[str, int] = field(default_factory=dict)
    version: int = field(default=VERSION)

    def to_dict(self) -> dict[str, Any]:
        values = []
        for value in self.values:
            entry: dict[str, Any] = {"name": value.name, "file": value.file, "sha256": value.sha256}
            if value.buffers is not None:
                buffers = value.buffers
                entry["buffers"] = {
                    "file": buffers.file,
                    "sha256": buffers.sha256,
                    "spans": [list(s) for s in buffers.spans],
                }
            values.append(entry)
        return {
            "version": self.version,
            "dir": self.directory,
            "values": values,
            "bytes": self.total_bytes,
            "base_plan": self.base_plan,
            "first_skipped": self.first_skipped,
            "expected_seconds": self.expected_seconds,
            "loose": dict(self.loose),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CarryManifest:
        if data.get("version") != VERSION:
            raise ManifestError(f"carry manifest version {data.get('version')!r}, this nb_cudaguard reads {VERSION}")
        try:
            values = tuple(
                CarriedFile(
                    name=str(entry["name"]),
                    file=str(entry["file"]),
                    sha256=str(entry["sha256"]),
                    buffers=_buffers(entry.get("buffers")),
                )
                for entry in data["values"]
            )
            return cls(
                directory=str(data["dir"]),
                values=values,
                total_bytes=int(data["bytes"]),
                base_plan=dict(data["base_plan"]),
                first_skipped=int(data["first_skipped"]),
                expected_seconds=float(data["expected_seconds"]),
                loose={str(name): int(seq) for name, seq in data.get("loose", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"carry manifest without a valid {exc}") from exc


def _buffers(data: dict[str, Any] | None) -> CarriedBuffers | None:
    if data is None:
        return None
    spans = tuple((int(offset), int(length)) for offset, length in data["spans"])
    return CarriedBuffers(file=str(data["file"]), sha256=str(data["sha256"]), spans=spans)
