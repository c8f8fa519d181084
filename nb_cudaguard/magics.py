"""``%cudaguard``: the extension's line magic. Each subcommand is a thin call into the guard object."""

from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit the kernel
        raise UsageError(f"%cudaguard: {message}\n{self.format_usage()}")

    def exit(self, status=0, message=None):
        if message:
            raise UsageError(message)
        raise UsageError(self.format_help())


def _build_parser() -> _Parser:
    parser = _Parser(prog="%cudaguard", description="nb_cudaguard: explain and recover from CUDA failures.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("status", help="what is recorded and captured, and the last incident")
    report = sub.add_parser("report", help="show the last failure's report again")
    fmt = report.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="Markdown, for pasting into an issue")
    fmt.add_argument("--json", action="store_true", help="JSON, for tools")
    sub.add_parser("demo", help="watch a simulated device-side assert in a separate, throw-away kernel")
    simulate = sub.add_parser("simulate", help="fault injection: simulate a GPU on this CPU-only kernel")
    simulate.add_argument("state", choices=["on", "off"])
    check = sub.add_parser("check", help="check assert-prone torch ops before they launch, in every cell")
    check.add_argument("state", nargs="?", choices=["on", "off"])
    check.add_argument("--sync", action="store_true", help="also synchronise after every op")
    _add_restart_commands(sub)
    return parser


def _add_restart_commands(sub) -> None:
    def cell_edits(command) -> None:
        command.add_argument("--add", type=int, nargs="+", default=[], metavar="N", help="also replay cells [N]")
        command.add_argument("--drop", type=int, nargs="+", default=[], metavar="N", help="do not replay cells [N]")
        command.add_argument("--cells", type=int, nargs="+", metavar="N", help="replay exactly these cells")
        command.add_argument("--carry", nargs="+", default=[], metavar="NAME", help="carry these values if possible")
        command.add_argument("--no-carry", nargs="*", metavar="NAME", help="do not carry these (none: carry nothing)")
        command.add_argument("--replay-cell", type=int, nargs="+", default=[], metavar="N", help="never skip [N]")

    restart = sub.add_parser("restart", help="restart the kernel in place and replay what the failing cell needs")
    restart.add_argument("--replay", choices=["minimal", "all", "none"], default="minimal")
    restart.add_argument("--diagnose", action="store_true", help="re-run the failing cell under %%%%cudacheck after")
    cell_edits(restart)
    replay = sub.add_parser("replay", help="show the replay plan (--dry-run) or the last replay's report")
    replay.add_argument("--dry-run", action="store_true", help="print the plan without running anything")
    replay.add_argument("--all", action="store_true", help="every successful cell instead of the minimal plan")
    replay.add_argument("--report", action="store_true", help="the report of the replay after the last restart")
    cell_edits(replay)


@magics_class
class CudaGuardMagics(Magics):
    def __init__(self, shell, guard) -> None:
        super().__init__(shell)
        self.guard = guard
        self.parser = _build_parser()

    @line_magic
    def cudaguard(self, line: str = ""):
        """Explain and recover from CUDA failures. ``%cudaguard --help`` lists the subcommands."""
        args = self.parser.parse_args(shlex.split(line) or ["status"])
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
        from nb_cudaguard.check.magics import every_cell, set_every_cell

        if args.state is None:
            print(every_cell(self.shell).describe())
        else:
            print(set_every_cell(self.shell, args.state == "on", sync=args.sync))

    def _cmd_simulate(self, args) -> None:
        from nb_cudaguard import testing

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


def _carry_options(args) -> dict:
    return {
        "carry": False if args.no_carry == [] else None,  # None: CudaGuard.carry decides
        "carry_names": args.carry,
        "no_carry": args.no_carry or [],
        "replay_cells": args.replay_cell,
    }
