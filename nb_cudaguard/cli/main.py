"""``nb-cudaguard``: explain a log you already have, or watch the demo."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    return Path(path).read_bytes().decode("utf-8", errors="replace")


def cmd_explain(args) -> int:
    from nb_cudaguard.diagnosis import diagnose
    from nb_cudaguard.incident.logparse import incident_from_log
    from nb_cudaguard.incident.savedlog import read_saved
    from nb_cudaguard.panel.report import Report

    try:
        saved = read_saved(_read(args.file))
    except OSError as exc:
        print(f"nb-cudaguard: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    code = saved.code  # a notebook's own cells, unless --code names other code
    if args.code:
        try:
            code = _read(args.code)
        except OSError as exc:
            print(f"nb-cudaguard: cannot read {args.code}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    incident = incident_from_log(saved.text)
    report = Report(incident, diagnose(incident, code=code))
    if args.json:
        print(report.to_json())
    elif args.markdown:
        print(report.to_markdown())
    else:
        if incident.exc_type == "(no exception found)" and not incident.assertions:
            print("nb-cudaguard: no CUDA error, Python exception or device assertion was found in this log.")
            return 1
        print(report.to_text())
    return 0


def cmd_demo(args) -> int:
    from nb_cudaguard.cli.demo import main

    return main()


def cmd_run(args) -> int:
    from nb_cudaguard.cli.runner import InvalidNotebook, NotebookRunner

    runner = NotebookRunner(
        args.notebook, output=args.output, on_poison=args.on_poison, timeout=args.timeout, kernel=args.kernel
    )
    try:
        outcome = runner.run()
    except InvalidNotebook as exc:
        print(f"nb-cudaguard: {exc}", file=sys.stderr)
        return 2
    writers = ((args.report, outcome.to_markdown), (args.json, lambda: json.dumps(outcome.to_dict(), indent=2)))
    for path, text in writers:
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text())
    print(outcome.to_markdown() if args.report is None and args.json is None else outcome.message)
    return outcome.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nb-cudaguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="explain an error log (a traceback, with or without assertion lines)")
    explain.add_argument("file", help="the log file, or - for standard input")
    explain.add_argument(
        "--code", metavar="FILE", help="the script or cell source that failed, read as static evidence"
    )
    fmt = explain.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output")
    fmt.add_argument("--markdown", action="store_true", help="Markdown, for an issue")
    explain.set_defaults(func=cmd_explain)
    run = sub.add_parser("run", help="execute a whole notebook with the extension; recover from a poisoned context")
    run.add_argument("notebook")
    run.add_argument("-o", "--output", help="where to write the executed notebook (default: NAME.executed.ipynb)")
    run.add_argument("--report", help="write a Markdown report of every incident here")
    run.add_argument("--json", help="write a JSON report here")
    run.add_argument(
        "--on-poison",
        choices=["stop", "diagnose", "skip"],
        default="stop",
        help="after a poisoned context: stop with the diagnosis, re-run the cell under checks then stop, or skip it",
    )
    run.add_argument("--timeout", type=float, default=None, help="seconds a cell may run before the run stops")
    run.add_argument("--kernel", help="kernel name, overriding the notebook's kernelspec")
    run.set_defaults(func=cmd_run)
    demo = sub.add_parser("demo", help="run a simulated device-side assert in a real kernel and show the report")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
