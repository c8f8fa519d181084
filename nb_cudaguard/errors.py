"""The package's exceptions: one base class for all of them, and the error ``%%cudacheck`` raises instead of
letting a kernel poison the CUDA context.

Kept free of torch (and of every other part of the package) so that ``except nb_cudaguard.CudaCheckError`` works
in code that never imports torch, and so that any part may raise them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar


class NbCudaguardError(Exception):
    """The base of every error nb_cudaguard raises on purpose, so that a caller can catch them all at once."""


class CudaCheckError(RuntimeError, NbCudaguardError):
    """An argument of an assert-prone op would have tripped a CUDA device assert; the op did not run.

    A ``RuntimeError`` first, like the CUDA error it replaces, so existing ``except RuntimeError`` code still
    catches it. The attributes carry what the report needs: which op and argument, the user's variable, the first
    offending values and their positions, how many there are, the valid range and where it comes from, the user's
    line (in the cell they ran) and where deeper in their code the op was called (``via``), and the fix. The CUDA
    context stays healthy: the next cell runs.

    ``str()`` is the whole message, for code that logs or parses it. IPython shows the error compactly instead
    (``_render_traceback_``): :meth:`headline`, the user's own frames, then :meth:`details`.
    """

    #: How IPython shows the error, set by the checks that raise it (``nb_cudaguard.check.render``): this module
    #: imports no other part of the package. Unset, IPython shows its usual traceback.
    renderer: ClassVar[Callable[[CudaCheckError], list[str]] | None] = None
    _values_label = "offending values"

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
        via: str | None = None,
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
        self.via = via
        self.fix = fix
        super().__init__(self._message())

    @property
    def subject(self) -> str:
        """The argument as the user knows it: ``target (labels)`` when the variable could be resolved."""
        return f"{self.argument} ({self.variable})" if self.variable else self.argument

    @property
    def _render_traceback_(self) -> Callable[[], list[str]]:
        """IPython's hook for an exception that formats itself (7.x to 9.x call it instead of their traceback).
        Absent while no renderer is set, so that IPython then shows its own."""
        render = CudaCheckError.renderer
        if render is None:
            raise AttributeError("_render_traceback_")
        return lambda: render(self)

    def headline(self) -> str:
        """One line: the op, the user's variable, the bad values and the user's line."""
        text = f"{self.op}: argument {self.subject} {self.problem}"
        if self.values:
            text += f": {self._values_text()}"
        return text + (f"; at {self.user_line}" if self.user_line else "")

    def details(self) -> list[str]:
        """What follows the user's frames: the valid range, the fix, and what became of the op and the context."""
        return self._range_lines() + self._fix_lines() + self._outcome_lines()

    def _message(self) -> str:
        lines = [f"{self.op}: argument {self.subject} {self.problem}"]
        if self.values:
            lines.append(f"  {self._values_label}: {self._values_text()}")
        lines += self._range_lines()
        if self.user_line:
            lines.append(f"  at: {self.user_line}" + (f" (via {self.via})" if self.via else ""))
        return "\n".join(lines + self._fix_lines() + self._outcome_lines())

    def _values_text(self) -> str:
        pairs = zip(self.values, self.positions, strict=False)
        shown = ", ".join(f"{_fmt(v)} at {_fmt_pos(p)}" for v, p in pairs)
        if self.count and self.count > len(self.values):
            shown += f" (first {len(self.values)} of {self.count})"
        return shown

    def _range_lines(self) -> list[str]:
        if not self.valid_range:
            return []
        source = f" (from {self.range_source})" if self.range_source else ""
        return [f"  valid: {self.valid_range}{source}"]

    def _fix_lines(self) -> list[str]:
        return [f"  fix: {self.fix}"] if self.fix else []

    def _outcome_lines(self) -> list[str]:
        return ["  nb_cudaguard stopped the op before it ran: the CUDA context is healthy, the next cell runs."]

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
            "via": self.via,
            "fix": self.fix,
        }


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _fmt_pos(position: Any) -> str:
    if isinstance(position, (list, tuple)):
        return "[" + ", ".join(str(p) for p in position) + "]"
    return f"[{position}]"
