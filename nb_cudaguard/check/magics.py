"""``%%cudacheck [--sync]`` and the every-cell checks behind ``%cudaguard check on|off [--fast|--exact]``.

The cell body runs like ``%%time`` runs it: transformed, compiled under a cached cell name (so tracebacks and the
check's "user line" show the cell's own lines, numbered as the user sees them) and executed in the user namespace,
with the value of a final expression returned for display. Errors propagate unchanged, so the extension's
post-run hook sees the ``CudaCheckError`` as the cell's error. The options are declared with IPython's
``magic_arguments``, so ``%%cudacheck?`` lists them as IPython's own magics do.

The every-cell checks come in two modes. The fast mode (the default) puts the fast entry points in place once,
when switched on, and ends every cell with a read of the device-side boards (``fast.cell``): one synchronisation
per cell. The exact mode enters the dispatch mode in ``pre_run_cell`` and leaves it in ``post_run_cell``, which
IPython calls after failing cells too; leaving tolerates modes the user pushed on top meanwhile (``Checker.leave``).
"""

from __future__ import annotations

import ast
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from nb_cudaguard.incident.usercode import note_filename

if TYPE_CHECKING:  # the mode imports torch; the magics are registered in shells that may never use it
    from IPython.core.interactiveshell import InteractiveShell

    from nb_cudaguard.check.fast.error import Rebuilds
    from nb_cudaguard.check.fast.mode import FastChecker
    from nb_cudaguard.check.mode import Checker


class EveryCell:
    """The checks around every cell of one shell, while ``%cudaguard check on``: fast (default) or exact."""

    def __init__(
        self,
        shell: InteractiveShell,
        rebuilds: Rebuilds | None = None,
        fired: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.shell = shell
        self.rebuilds = rebuilds  # the session's replay planner, for the cells that rebuild what a check made wrong
        self.fired = fired  # the session's answer to a check that fired in a cell which then raised its own error
        self.enabled = False
        self.sync = False
        self.fast = True
        self.checker: Checker | None = None
        self.fast_checker: FastChecker | None = None
        self.source: str | None = None  # the running cell's, for the names a fired fast check made wrong
        self.ended = False  # the running cell reached its cell_end (the boards were read)

    def set(self, enabled: bool, sync: bool = False, fast: bool = True) -> None:
        fast = fast and not sync
        if enabled and not self.enabled:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
        elif not enabled and self.enabled:
            for name, hook in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
                try:
                    self.shell.events.unregister(name, hook)
                except ValueError:
                    pass
        self._leave()
        self._leave_fast()
        self.enabled, self.sync, self.fast = enabled, sync, fast
        if enabled and fast:
            self._enter_fast()
        elif enabled:  # the rest of the current cell is checked too; post_run_cell leaves as usual
            self._enter()

    def pre_run_cell(self, info=None) -> None:
        if self.fast:
            self.source, self.ended = getattr(info, "raw_cell", None), False
            return
        self._leave()
        self._enter()

    def post_run_cell(self, result=None) -> None:
        if not self.fast:
            self._leave()
            return
        if self.fast_checker is None or self.ended:
            return
        error = self.finish_cell()  # the cell raised before its end: say whether a check had fired first
        if error is not None:
            print(f"nb_cudaguard: before this cell failed, a fast check had fired:\n{error}", file=sys.stderr)
            if self.fired is not None:
                self.fired(error)

    def finish_cell(self) -> BaseException | None:
        """Read the boards once for this cell (``fast.cell.cell_end`` or ``post_run_cell``)."""
        self.ended = True
        if self.fast_checker is None:
            return None
        return self.fast_checker.finish(self.source)

    @contextlib.contextmanager
    def running(self, source: str) -> Iterator[None]:
        """For a cell run from inside another (a re-run, ``panel.rerun``), which gets no ``pre_run_cell``: a check
        firing in it names what *it* assigned, and the cell around it still reads the boards when it ends."""
        saved = self.source, self.ended
        self.source = source
        try:
            yield
        finally:
            self.source, self.ended = saved

    def _enter(self) -> None:
        from nb_cudaguard.check.mode import Checker

        self.checker = Checker(sync=self.sync, namespace=self.shell.user_ns).__enter__()

    def _leave(self) -> None:
        if self.checker is not None:
            self.checker.leave()
            self.checker = None

    def _enter_fast(self) -> None:
        from nb_cudaguard.check.fast.cell import CURRENT, install
        from nb_cudaguard.check.fast.mode import FastChecker

        self.fast_checker = FastChecker(namespace=self.shell.user_ns, rebuilds=self.rebuilds).__enter__()
        self.ended = False  # the cell switching the checks on has no cell_end: its post_run_cell reads instead
        CURRENT.append(self)
        install(self.shell)

    def _leave_fast(self) -> None:
        if self.fast_checker is None:
            return
        from nb_cudaguard.check.fast.cell import CURRENT, uninstall

        uninstall(self.shell)
        if self in CURRENT:
            CURRENT.remove(self)
        self.fast_checker.finish()  # what fired before the switch belongs to no cell any more
        self.fast_checker.leave()
        self.fast_checker = None

    def turn(self, enabled: bool, sync: bool = False, fast: bool = True) -> str:
        """``%cudaguard check on|off``: set the state and say it, as a line to print."""
        self.set(enabled, sync, fast)
        return self.describe()

    def describe(self) -> str:
        if not self.enabled:
            return "nb_cudaguard: checks off (turn on for every cell with %cudaguard check on, or use %%cudacheck)"
        if self.fast:
            return (
                "nb_cudaguard: every cell runs with assert-prone ops checked on the device (fast: no sync per op, "
                "one read when the cell ends; --exact stops the op before it runs)"
            )
        sync = " with --sync" if self.sync else ""
        return f"nb_cudaguard: every cell runs with assert-prone ops checked before they launch (exact){sync}"


@magics_class
class CudaCheckMagics(Magics):
    """``%%cudacheck``; the session (``CudaGuard``) owns the every-cell state it shares with ``%cudaguard check``."""

    def __init__(self, every_cell: EveryCell) -> None:
        super().__init__(every_cell.shell)
        self.every_cell = every_cell

    @magic_arguments("%cudacheck")  # the help's usage line adds the other "%"
    @argument("-h", "--help", action="store_true", help="show this help instead of running the cell")
    @argument(
        "--sync", action="store_true", help="also synchronise after every op, to pin other asynchronous CUDA errors"
    )
    @argument(
        "--as-recorded",
        action="store_true",
        help="the body is a recorded cell run again: number its lines as in that cell (line 1 is its first line)",
    )
    @cell_magic
    def cudacheck(self, line: str, cell: str):
        """Run the cell with every assert-prone torch op checked before it launches.

        A bad label, index or probability raises ``nb_cudaguard.CudaCheckError`` naming the op, the argument and
        your variable, the offending values and positions, the valid range and your line, before the kernel can
        poison the CUDA context.
        """
        args = parse_argstring(self.cudacheck, line)
        if args.help:
            raise UsageError(self.cudacheck.parser.format_help())
        active = self.every_cell.checker
        if active is not None and active.active:  # already checked by %cudaguard check on: add --sync only
            previous = active.mode.sync
            active.mode.sync = previous or args.sync
            try:
                return self._run(cell, args.as_recorded)
            finally:
                active.mode.sync = previous
        from nb_cudaguard.check.mode import Checker

        with Checker(sync=args.sync, namespace=self.every_cell.shell.user_ns):
            return self._run(cell, args.as_recorded)

    def _run(self, cell: str, as_recorded: bool = False):
        shell = self.every_cell.shell
        source = shell.transform_cell(cell)
        above = "" if as_recorded else "\n"  # typed as a cell's first line, the magic puts the body on line 2
        numbered = above + source
        filename = shell.compile.cache(numbered, shell.execution_count, raw_code=above + cell)
        note_filename(filename, shell.execution_count)
        tree = ast.parse(numbered, filename=filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        namespace = shell.user_ns
        flags = getattr(shell.compile, "flags", 0)
        if tree.body:
            exec(compile(tree, filename, "exec", flags=flags, dont_inherit=True), namespace)
        if last is None:
            return None
        expression = ast.Expression(last.value)
        return eval(compile(expression, filename, "eval", flags=flags, dont_inherit=True), namespace)
