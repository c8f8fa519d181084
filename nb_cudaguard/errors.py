"""The package's exceptions: one base class for all of them, and the error ``%%cudacheck`` raises instead of
letting a kernel poison the CUDA context.

Kept free of torch (and of every other part of the package) so that ``except nb_cudaguard.CudaCheckError`` works
in code that never imports torch, and so that any part may raise them.
"""

from __future__ import annotations

from typing import Any


class NbCudaguardError(Exception):
    """The base of every error nb_cudaguard raises on purpose, so that a caller can catch them all at once."""


class CudaCheckError(RuntimeError, NbCudaguardError):
    """An argument of an assert-prone op would have tripped a CUDA device assert; the op did not run.

    A ``RuntimeError`` first, like the CUDA error it replaces, so existing ``except RuntimeError`` code still
    catches it. The attributes carry what the report needs: which op and argument, the user's variable, the first
    offending values and their positions, how many there are, the valid range and where it comes from, the user's
    line, and the fix. The CUDA context stays healthy: the next cell runs.
    """

    def __init__(
        self,
        *,
        op: str,
        argument: str,
        family: str,
        problem: str,
        values: list[Any] | None = None,
        positions: list[Any] | None = None,
        count: int | None = None,
        valid_range: str | None = None,
        range_source: str | None = None,
        variable: str | None = None,
        user_line: str | None = None,
        fix: str = "",
    ) -> None:
        self.op = op
        self.argument = argument
        self.family = family
        self.problem = problem
        self.values = list(values or [])
        self.positions = list(positions or [])
        self.count = count
        self.valid_range = valid_range
        self.range_source = range_source
        self.variable = variable
        self.user_line = user_line
        self.fix = fix
        super().__init__(self._message())

    @property
    def subject(self) -> str:
        """The argument as the user knows it: ``target (labels)`` when the variable could be resolved."""
        return f"{self.argument} ({self.variable})" if self.variable else self.argument

    def _message(self) -> str:
        lines = [f"{self.op}: argument {self.subject} {self.problem}"]
        if self.values:
            pairs = zip(self.values, self.positions, strict=False)
            shown = ", ".join(f"{_fmt(v)} at {_fmt_pos(p)}" for v, p in pairs)
            more = ""
            if self.count and self.count > len(self.values):
                more = f" (first {len(self.values)} of {self.count})"
            lines.append(f"  offending values: {shown}{more}")
        lines += self._range_line_and_fix()
        lines.append("  nb_cudaguard stopped the op before it ran: the CUDA context is healthy, the next cell runs.")
        return "\n".join(lines)

    def _range_line_and_fix(self) -> list[str]:
        """The valid range and where it comes from, the user's line and the fix: worded once for both modes."""
        lines = []
        if self.valid_range:
            source = f" (from {self.range_source})" if self.range_source else ""
            lines.append(f"  valid: {self.valid_range}{source}")
        if self.user_line:
            lines.append(f"  at: {self.user_line}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "argument": self.argument,
            "family": self.family,
            "problem": self.problem,
            "variable": self.variable,
            "values": self.values,
            "positions": self.positions,
            "count": self.count,
            "valid_range": self.valid_range,
            "range_source": self.range_source,
            "user_line": self.user_line,
            "fix": self.fix,
        }


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _fmt_pos(position: Any) -> str:
    if isinstance(position, (list, tuple)):
        return "[" + ", ".join(str(p) for p in position) + "]"
    return f"[{position}]"
