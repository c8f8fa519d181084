"""What failed: the exception, the user's frames, the assertion lines the GPU printed, and the context's health.

An Incident is built once, right after a failing cell, and is then only read: the diagnosis, the report, the
panel and the JSON all render the same object. It keeps live references (the exception, frame locals, the user
namespace) for the diagnosis; those are never serialised.
"""

from __future__ import annotations

import linecache
import sys
import time
import traceback
from dataclasses import dataclass, field
from types import FrameType

from nb_cudaguard.incident import catalog
from nb_cudaguard.incident.probe import Health, active_probe
from nb_cudaguard.incident.usercode import cell_number, is_user_file, users_line
from nb_cudaguard.record.assertions import AssertionRecord
from nb_cudaguard.record.journal import CellRecord, cell_label


@dataclass
class Frame:
    filename: str
    lineno: int
    function: str
    line: str
    is_user: bool
    cell: int | None = None  # the execution count, when the frame is a notebook cell
    locals: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def where(self) -> str:
        if self.cell is not None:
            return f"cell {cell_label(self.cell)}, line {self.lineno}"
        return f"{self.filename}:{self.lineno}"

    def to_dict(self) -> dict:
        return {
            "filename": self.filename,
            "lineno": self.lineno,
            "function": self.function,
            "line": self.line,
            "is_user": self.is_user,
            "cell": self.cell,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Frame:
        return cls(
            str(data["filename"]), int(data["lineno"]), str(data["function"]), str(data["line"]),
            bool(data["is_user"]), data.get("cell"),
        )  # fmt: skip


def _scope(frame: FrameType) -> dict:
    """A user frame's local names, as the diagnosis reads them. A cell's top level is its namespace itself, kept
    as it is, never copied: a copy would hold every value the cell saw for as long as the report lives, so a tensor
    the user lets go later (``out = None`` to free a graph, ``del big`` after an out-of-memory error) stayed alive
    in it. A function's locals are a snapshot, as the traceback that IPython keeps holds them too."""
    scope = frame.f_locals
    return scope if scope is frame.f_globals else dict(scope)


def frames_of(exc: BaseException, cell_filenames: dict[str, int] | None = None) -> list[Frame]:
    cell_filenames = cell_filenames or {}
    frames = []
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        filename = code.co_filename
        cell = cell_number(filename, cell_filenames)
        is_user = cell is not None or is_user_file(filename)
        frames.append(
            Frame(
                filename=filename,
                lineno=lineno,
                function=code.co_name,
                line=linecache.getline(filename, lineno, frame.f_globals).strip(),
                is_user=is_user,
                cell=cell,
                locals=_scope(frame) if is_user else {},
            )
        )
    return frames


@dataclass
class Incident:
    exc_type: str
    message: str
    classification: str  # "poisoned" | "recoverable" | "not_cuda"
    health: Health
    frames: list[Frame] = field(default_factory=list)
    assertions: list[AssertionRecord] = field(default_factory=list)
    cell: CellRecord | None = None
    output_tail: str = ""
    created: float = field(default_factory=time.time)
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    namespace: dict | None = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The error as a log would show it, plus the captured output: what the catalog matches against."""
        return f"{self.exc_type}: {self.message}\n{self.output_tail}"

    @property
    def user_frames(self) -> list[Frame]:
        return [f for f in self.frames if f.is_user]

    @property
    def user_frame(self) -> Frame | None:
        """Where it failed: the innermost of the user's frames."""
        frames = self.user_frames
        return frames[-1] if frames else None

    @property
    def users_line(self) -> Frame | None:
        """The line of the cell the user ran that led to the failure (``usercode.users_line``)."""
        frames = self.user_frames
        found = users_line(frames)
        return frames[found[0]] if found is not None else None

    @property
    def poisoned(self) -> bool | None:
        if self.classification == "poisoned":
            return True
        if self.classification == "recoverable":
            return False
        return None

    @property
    def is_cuda(self) -> bool:
        return self.classification != "not_cuda"

    def to_dict(self) -> dict:
        return {
            "exc_type": self.exc_type,
            "message": self.message,
            "classification": self.classification,
            "poisoned": self.poisoned,
            "health": self.health.to_dict(),
            "frames": [f.to_dict() for f in self.frames],
            "assertions": [a.to_dict() for a in self.assertions],
            "cell": self.cell.to_dict(with_names=False) if self.cell else None,
            "created": self.created,
            "output_tail": self.output_tail,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Incident:
        """An incident as ``to_dict`` wrote it (a report carried across a restart): everything but the live
        objects, which stayed in the process that failed."""
        cell = data.get("cell")
        return cls(
            exc_type=str(data["exc_type"]),
            message=str(data["message"]),
            classification=str(data["classification"]),
            health=Health(**data["health"]),
            frames=[Frame.from_dict(f) for f in data.get("frames", [])],
            assertions=[AssertionRecord(**a) for a in data.get("assertions", [])],
            cell=CellRecord.from_dict(cell) if cell else None,
            output_tail=str(data.get("output_tail", "")),
            created=float(data.get("created", 0.0)),
        )


def classify(text: str, assertions: list[AssertionRecord], health: Health) -> str:
    """The error's own words decide whether the failure is CUDA's; the probe only says how bad a CUDA failure is.

    A ``NameError`` in a session that initialised CUDA (every GPU session does) is no CUDA failure, whatever the
    probe answers: a healthy probe says nothing about it, and a poisoned one means an earlier cell broke the
    context, not this one. So a failure is CUDA's only when its text is a CUDA error (the sticky error included) or
    the cell printed a device assertion. Live, only the probe can then say "poisoned"; from a log (no probe), a
    sticky error text or an assertion line does.
    """
    if not (assertions or catalog.is_cuda_text(text)):
        return "not_cuda"
    if health.state == "poisoned":
        return "poisoned"
    if health.source == "log" and (catalog.sticky_verdict(text) is True or assertions):
        return "poisoned"
    return "recoverable"


def error_text(exc: BaseException) -> str:
    """The messages of the error and of the errors it was raised from or during (a library that re-raises a CUDA
    error as its own keeps CUDA's text one link down the chain): what tells a CUDA failure from any other."""
    parts, seen = [], set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if link is not exc:
            parts.append(f"{_qualified_name(link)}: {link}")
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return "\n".join(parts)


def _qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    if module.startswith("nb_cudaguard"):
        return f"nb_cudaguard.{cls.__qualname__}"
    if module.startswith("torch"):
        # torch.AcceleratorError lives in torch._C; users know it by its public name.
        public = sys.modules.get("torch")
        if public is not None and getattr(public, cls.__name__, None) is cls:
            return f"torch.{cls.__name__}"
    return f"{module}.{cls.__qualname__}"


def build_incident(
    exc: BaseException,
    *,
    output_tail: str = "",
    assertions: list[AssertionRecord] | None = None,
    cell: CellRecord | None = None,
    cell_filenames: dict[str, int] | None = None,
    namespace: dict | None = None,
) -> Incident:
    """Called right after a cell failed: the probe runs here, and only here."""
    message = str(exc)
    assertions = list(assertions or [])
    exc_type = _qualified_name(exc)
    health = active_probe().check()
    text = f"{exc_type}: {message}\n{error_text(exc)}\n{output_tail}"
    return Incident(
        exc_type=exc_type,
        message=message,
        classification=classify(text, assertions, health),
        health=health,
        frames=frames_of(exc, cell_filenames),
        assertions=assertions,
        cell=cell,
        output_tail=output_tail,
        exception=exc,
        namespace=namespace,
    )
