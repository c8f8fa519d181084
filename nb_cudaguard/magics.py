"""``%cudaguard``: the extension's line magic. Each subcommand is a thin call into the guard object."""

from __future__ import annotations

import argparse

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

# Which options each subcommand takes: one flat parser (so that ``%cudaguard?`` lists every option, as IPython's own
# magics do) and this table, which refuses an option given to a subcommand that has no use for it.
_CELL_EDITS = {"add", "drop", "cells", "carry", "no_carry", "replay_cell"}
_OPTIONS = {
    "status": set(),
    "report": {"markdown", "json"},
    "demo": set(),
    "simulate": {"state"},
    "check": {"state", "sync", "fast", "exact"},
    "restart": {"replay", "diagnose"} | _CELL_EDITS,
    "replay": {"dry_run", "all", "report"} | _CELL_EDITS,
    "rerun": {"exact", "rebuild", "dry_run"},
}
_DEFAULTS = {"replay": "minimal"}


@magics_class
class CudaGuardMagics(Magics):
    def __init__(self, shell, guard) -> None:
        super().__init__(shell)
        self.guard = guard

    @magic_arguments()
    @argument(
        "command",
        nargs="?",
        default="status",
        choices=list(_OPTIONS),
        help="status: what is recorded and captured, and the last incident; report: the last failure's report again; "
        "demo: a simulated device-side assert in a throw-away kernel; simulate on|off: a simulated GPU on this CPU "
        "(fault injection); check [on|off] [--fast|--exact]: check assert-prone torch ops in every cell; "
        "restart: restart the kernel in place and replay what the failing cell needs; replay: the replay plan "
        "(--dry-run) or the last replay's report (--report); rerun --exact|--rebuild: after a fast check fired, "
        "run its cell again under the exact checks, or re-run the cells that build what it changed (no restart).",
    )
    @argument("state", nargs="?", choices=["on", "off"], help="for simulate and check")
    @argument("--markdown", action="store_true", help="report: Markdown, for pasting into an issue")
    @argument("--json", action="store_true", help="report: JSON, for tools")
    @argument(
        "--fast",
        action="store_true",
        help="check (the default): checks on the device, no synchronisation per op, one read when the cell ends",
    )
    @argument(
        "--exact",
        action="store_true",
        help="check: stop each bad op before it runs (a dispatch mode); rerun: the fired cell, under %%%%cudacheck",
    )
    @argument("--rebuild", action="store_true", help="rerun: re-run the cells that build what the fired cell changed")
    @argument("--sync", action="store_true", help="check --exact: also synchronise after every op")
    @argument("--replay", choices=["minimal", "all", "none"], help="restart: which cells to replay (minimal)")
    @argument("--diagnose", action="store_true", help="restart: re-run the failing cell under %%%%cudacheck after")
    @argument("--dry-run", action="store_true", help="replay, rerun --rebuild: print the plan without running anything")
    @argument("--all", action="store_true", help="replay: every successful cell instead of the minimal plan")
    @argument("--report", action="store_true", help="replay: the report of the replay after the last restart")
    @argument("--add", type=int, nargs="+", default=[], metavar="N", help="restart, replay: also replay cells [N]")
    @argument("--drop", type=int, nargs="+", default=[], metavar="N", help="restart, replay: do not replay [N]")
    @argument("--cells", type=int, nargs="+", metavar="N", help="restart, replay: replay exactly these cells")
    @argument("--carry", nargs="+", default=[], metavar="NAME", help="restart, replay: carry these values if possible")
    @argument(
        "--no-carry", nargs="*", metavar="NAME", help="restart, replay: do not carry these (none given: carry nothing)"
    )
    @argument("--replay-cell", type=int, nargs="+", default=[], metavar="N", help="restart, replay: never skip [N]")
    @line_magic
    def cudaguard(self, line: str = ""):
        """Explain and recover from CUDA failures."""
        args = parse_argstring(self.cudaguard, line)
        _refuse_foreign_options(args)
        for name, value in _DEFAULTS.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
        return getattr(self, f"_cmd_{args.command}")(args)

    def _cmd_status(self, args) -> None:
        print(self.guard.status())

    def _cmd_report(self, args):
        report = self.guard.last_report
        if report is None:
            print("nb_cudaguard: no failing cell recorded yet.")
            return None
        if args.markdown:
            print(report.to_markdown())
        elif args.json:
            print(report.to_json())
        else:
            self.guard.show(report)

    def _cmd_demo(self, args) -> None:
        from nb_cudaguard.cli.demo import run_demo

        run_demo(write=print)

    def _cmd_check(self, args) -> None:
        if args.fast and (args.exact or args.sync):
            raise UsageError("%cudaguard check: --fast never synchronises; --exact (and --sync) is the other mode")
        if args.state is None:
            print(self.guard.every_cell.describe())
        else:
            fast = not (args.exact or args.sync)
            print(self.guard.every_cell.turn(args.state == "on", sync=args.sync, fast=fast))

    def _cmd_simulate(self, args) -> None:
        from nb_cudaguard import testing

        if args.state is None:
            raise UsageError("%cudaguard simulate: say on or off")
        if args.state == "on":
            testing.enable()
            print("nb_cudaguard: simulated GPU on. Bad inputs to assert-prone ops now poison it, as on a real GPU.")
        else:
            testing.disable()
            print("nb_cudaguard: simulated GPU off.")

    def _cmd_restart(self, args) -> None:
        from nb_cudaguard.relaunch.restart import restart

        restart(
            self.guard, args.replay, args.diagnose, cells=args.cells, add=args.add, drop=args.drop,
            **_carry_options(args),
        )  # fmt: skip

    def _cmd_replay(self, args) -> None:
        if args.report:
            outcome = self.guard.last_replay
            print(outcome.to_text() if outcome is not None else "nb_cudaguard: no restart has replayed cells yet.")
            return
        from nb_cudaguard.replay.plan import build_plan

        mode = "all" if args.all else "minimal"
        plan = build_plan(self.guard.journal, mode, add=args.add, drop=args.drop, cells=args.cells)
        options = _carry_options(args)
        carry = options.pop("carry")
        if (self.guard.carry if carry is None else carry) and plan.steps and plan.target is not None:
            from nb_cudaguard.carry.files import plan_for

            options["force_carry"] = options.pop("carry_names")
            print(plan.to_text() + "\n\n" + plan_for(self.shell, self.guard, plan, **options).to_text())
            return
        print(plan.to_text())

    def _cmd_rerun(self, args):
        """After a fast check fired: its cell under the exact checks (its error becomes this cell's), or the cells
        that build what it changed, re-run in this process (``panel.rerun``)."""
        if args.exact == args.rebuild or (args.dry_run and not args.rebuild):
            raise UsageError("%cudaguard rerun: say --exact (the fired cell under %%cudacheck) or --rebuild")
        from nb_cudaguard.panel.rerun import fired_cell, numbered, rebuild
        from nb_cudaguard.replay.plan import rebuild_plan

        try:
            fired = fired_cell(self.guard)
        except LookupError as exc:
            raise UsageError(f"%cudaguard rerun: {exc}") from None
        if args.exact:
            print(f"nb_cudaguard: running {fired.record.label} again under the exact checks (%%cudacheck)")
            with numbered(self.shell, fired.record):
                value = self.shell.run_cell_magic("cudacheck", "--as-recorded", fired.record.source)
            print(f"nb_cudaguard: {fired.record.label} ran without a failure under the exact checks")
            return value
        if args.dry_run:
            print(rebuild_plan(self.guard.journal, fired.error.changed_names, fired.record).to_text())
            return None
        print(rebuild(self.guard, fired).to_text())
        return None


def _carry_options(args) -> dict:
    return {
        "carry": False if args.no_carry == [] else None,  # None: CudaGuard.carry decides
        "carry_names": args.carry,
        "no_carry": args.no_carry or [],
        "replay_cells": args.replay_cell,
    }


def _refuse_foreign_options(args: argparse.Namespace) -> None:
    """An option the subcommand has no use for is a mistake (a typo, a misplaced flag): say so, do nothing."""
    defaults = {"state": None, "no_carry": None, "cells": None, "replay": None}
    given = sorted(
        name
        for name, value in vars(args).items()
        if name != "command" and value not in (False, [], defaults.get(name, False)) and value is not None
    )
    foreign = [name for name in given if name not in _OPTIONS[args.command]]
    if foreign:
        shown = ", ".join(("--" + n.replace("_", "-")) if n != "state" else "on/off" for n in foreign)
        raise UsageError(f"%cudaguard {args.command} does not take {shown} (%cudaguard? lists every option)")
