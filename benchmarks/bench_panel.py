"""What the panel adds after a failure, as a ratio to the plain report built from the same failure in the same run.

`python benchmarks/bench_panel.py [--repeat N]`. A real shell with the extension and the simulated GPU fails one
cell (a 195-unit head for 196 classes, through a DataLoader, with 2 M floats in the namespace); then, N times each,
interleaved: the baseline renders the existing Report (text, Markdown, HTML); the panel gathers its facts (tensor
summaries, replay plan), renders its three formats once and builds its widgets. Both run only after a failing cell.
"""

from __future__ import annotations

import argparse
import statistics
import time

SETUP = [
    "import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader, TensorDataset",
    "%cudaguard simulate on",
    "features = torch.randn(2048, 1024)\ntargets = torch.arange(2048) % 196",
    "loader = DataLoader(TensorDataset(features, targets), batch_size=64)",
    "model = nn.Sequential(nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 195))",
]
FAILING = "for xb, yb in loader:\n    loss = nn.functional.cross_entropy(model(xb), yb)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from nb_cudaguard import get_guard
    from nb_cudaguard.panel.widget import Panel, gather

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nb_cudaguard")
    for cell in SETUP:
        assert shell.run_cell(cell).success, cell
    with capture_output():
        assert not shell.run_cell(FAILING).success
    guard = get_guard(shell)
    report = guard.last_report

    def baseline() -> None:
        report.to_text(), report.to_markdown(), report.to_html()

    def panel() -> None:
        Panel(gather(report), guard).widget.close_all()

    timings: dict[str, list[float]] = {"report": [], "panel": []}
    for _ in range(args.repeat):
        for name, job in (("report", baseline), ("panel", panel)):
            started = time.perf_counter()
            job()
            timings[name].append(time.perf_counter() - started)
    report_ms = statistics.median(timings["report"]) * 1000
    panel_ms = statistics.median(timings["panel"]) * 1000
    ratio = panel_ms / report_ms
    print(f"report (baseline) median {report_ms:.2f} ms; panel median {panel_ms:.2f} ms; ratio {ratio:.1f}")


if __name__ == "__main__":
    main()
