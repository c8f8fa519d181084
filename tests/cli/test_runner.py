"""`nb-cudaguard run` on real notebooks through nbclient, and on broken inputs."""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import termios
import threading

import nbformat
import pytest

from nb_cudaguard.cli.main import main

pytestmark = pytest.mark.kernel


def _notebook(path, *sources, kernelspec=True, tags=None):
    nb = nbformat.v4.new_notebook()
    if kernelspec:
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# a notebook")]
    for number, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source)
        if tags and number in tags:
            cell.metadata["tags"] = tags[number]
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def test_all_cells_run(tmp_path, capsys):
    path = _notebook(tmp_path / "ok.ipynb", "x = 20", "print(x + 22)")
    assert main(["run", str(path), "-o", str(tmp_path / "out.ipynb"), "--json", str(tmp_path / "r.json")]) == 0
    progress = capsys.readouterr().err  # no terminal: tqdm (installed here) stands aside for the plain lines
    assert "cell 1 (1/2): ok" in progress and "cell 2 (2/2): ok" in progress and "it/s" not in progress
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[2].outputs[0]["text"] == "42\n"
    report = json.loads((tmp_path / "r.json").read_text())
    assert [c["status"] for c in report["cells"]] == ["ok", "ok"] and report["incidents"] == []


def test_failing_cell_carries_the_report_and_stops(tmp_path):
    pytest.importorskip("torch")
    path = _notebook(
        tmp_path / "bad.ipynb",
        "import torch\nlogits = torch.randn(4, 3)\nlabels = torch.tensor([0, 1, 2, 3])",
        "loss = torch.nn.functional.cross_entropy(logits, labels)",
        "print('not reached')",
    )
    out, md = tmp_path / "out.ipynb", tmp_path / "r.md"
    assert main(["run", str(path), "-o", str(out), "--report", str(md)]) == 1
    executed = nbformat.read(out, as_version=4)
    failing = executed.cells[2].outputs
    bundle = next(o for o in failing if o["output_type"] == "display_data")["data"]
    assert {"text/plain", "text/markdown", "text/html"} <= set(bundle)
    assert "label_out_of_range" in bundle["text/markdown"]
    assert executed.cells[3].outputs == []
    text = md.read_text()
    assert "Incident 1: cell 2 (not_cuda)" in text and "· label_out_of_range</sub>" in text
    assert "`label_out_of_range`" not in text  # a family id is a grey tag, never the head of a cause
    assert "- cells: 1 ok, 1 failed, 1 never ran (the run stopped at cell 2) of 3," in text


def test_raises_exception_tag_lets_the_run_go_on(tmp_path):
    path = _notebook(tmp_path / "t.ipynb", "1/0", "print('after')", tags={0: ["raises-exception"]})
    assert main(["run", str(path), "-o", str(tmp_path / "o.ipynb")]) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such notebook"), ("{not json", "not a readable notebook"), ('{"cells": 3}', "not")],
)
def test_invalid_notebooks_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "broken.ipynb"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_no_kernelspec_is_a_clear_error_and_kernel_overrides_it(tmp_path, capsys):
    path = _notebook(tmp_path / "nospec.ipynb", "print(1)", kernelspec=False)
    assert main(["run", str(path)]) == 2
    assert "--kernel python3" in capsys.readouterr().err
    assert main(["run", str(path), "--kernel", "python3", "-o", str(tmp_path / "o.ipynb")]) == 0


def test_timeout_writes_the_partial_notebook(tmp_path):
    path = _notebook(tmp_path / "slow.ipynb", "a = 1", "import time\ntime.sleep(30)", "b = 2")
    out = tmp_path / "o.ipynb"
    assert main(["run", str(path), "-o", str(out), "--timeout", "3", "--json", str(tmp_path / "r.json")]) == 1
    statuses = [c["status"] for c in json.loads((tmp_path / "r.json").read_text())["cells"]]
    assert statuses == ["ok", "timeout"]
    assert nbformat.read(out, as_version=4).cells[1]["execution_count"] == 1


def test_a_kernel_that_dies(tmp_path):
    path = _notebook(tmp_path / "die.ipynb", "x = 1", "import os\nos._exit(1)", "y = 2")
    out = tmp_path / "o.ipynb"
    assert main(["run", str(path), "-o", str(out), "--json", str(tmp_path / "r.json")]) == 1
    statuses = [c["status"] for c in json.loads((tmp_path / "r.json").read_text())["cells"]]
    assert statuses == ["ok", "dead_kernel"]
    assert out.exists()


POISONING = (
    "import torch\n%cudaguard simulate on\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
    "X = torch.randn(8, 4).to(device)\ny = torch.arange(8).to(device)",
    "model = torch.nn.Linear(4, 5).to(device)",
    "loss = torch.nn.functional.cross_entropy(model(X), y)",
    "print('after', tuple(model(X).shape))",
)


@pytest.mark.parametrize("mode", ["stop", "diagnose", "skip"])
def test_poisoned_context_is_restarted_replayed_and_handled(tmp_path, mode):
    pytest.importorskip("torch")
    path = _notebook(tmp_path / "poison.ipynb", *POISONING)
    out, report = tmp_path / "o.ipynb", tmp_path / "r.json"
    assert main(["run", str(path), "-o", str(out), "--json", str(report), "--on-poison", mode]) == 1
    data = json.loads(report.read_text())
    [incident] = data["incidents"]
    assert incident["classification"] == "poisoned"
    replay = incident["replay"]
    # the setup cell is replayed (imports, magics); the model cell may be skipped with its value carried
    assert replay["how"] == "exec" and replay["failed"] is None and 1 <= len(replay["replayed"]) <= 2
    executed = nbformat.read(out, as_version=4)
    failing_outputs = executed.cells[3].outputs
    done = f"replayed {len(replay['replayed'])}/"
    assert any(done in o.get("data", {}).get("text/plain", "") for o in failing_outputs)
    statuses = [c["status"] for c in data["cells"]]
    if mode == "skip":
        assert statuses == ["ok", "ok", "skipped", "ok"]
        texts = "".join(o.get("text", "") for o in executed.cells[4].outputs)
        assert "after (8, 5)" in texts  # the rebuilt state, in a healthy context
    else:
        assert statuses == ["ok", "ok", "error"]
    if mode == "diagnose":
        said = replay["diagnosis"]  # as the panel says it, not the exception's raw line
        assert said.startswith("`y` has 3 values outside [0, 5)") and "CudaCheckError" not in said, said
        # the values read under %%cudacheck replace the ranking made while the device could not be read
        top = incident["causes"][0]
        assert incident["pinned"] and top["evidence"][0]["kind"] == "guard" and top["variable"] == "y"
        assert top["evidence"][0]["values"] == [5, 6, 7] and top["confidence"] == 1.0
    else:
        assert replay["diagnosis"] is None


def test_run_an_example_notebook_with_diagnosis(tmp_path):
    pytest.importorskip("torch")
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[2] / "example_notebooks" / "01_image_classifier_196_classes.ipynb"
    out, report = tmp_path / "car.ipynb", tmp_path / "car.md"
    assert main(["run", str(notebook), "-o", str(out), "--report", str(report), "--on-poison", "diagnose"]) == 1
    text = report.read_text()
    assert "(poisoned)" in text and re.search(r"\(in `yb`\) <sub>\d+% · num_classes_mismatch</sub>", text), text
    # pinned under %%cudacheck, said in the notebook's own variable, the one the loop took its batches from
    assert "`labels` (as `yb` in the failing line) holds 195, outside [0, 195)" in text, text
    # the fix in the user's own terms: their class's argument and the constant that counts the classes
    assert "build model with CarNet(num_classes=NUM_CLASSES) (now `model = CarNet(num_classes=195)" in text
    assert nbformat.read(out, as_version=4).cells[5].outputs  # the failing cell keeps its report


@pytest.mark.parametrize("tqdm", ["installed", "missing"])
def test_progress_on_a_terminal_is_tqdm_s_bar_or_plain_lines_without_it(tmp_path, tqdm):
    """The real command, its stderr a terminal (a pty): tqdm's bar, or the plain lines where tqdm cannot be
    imported (a None in sys.modules makes ``import tqdm`` fail, as when it is not installed)."""
    pytest.importorskip("tqdm")
    path = _notebook(tmp_path / "ok.ipynb", "x = 20", "print(x + 22)", "failing = 1/0")
    hide = "sys.modules['tqdm'] = None; " if tqdm == "missing" else ""
    code = f"import sys; {hide}from nb_cudaguard.cli.main import main; sys.exit(main(sys.argv[1:]))"
    main_fd, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(main_fd, chunks))
    reader.start()
    try:
        ran = subprocess.run(
            [sys.executable, "-c", code, "run", str(path), "-o", str(tmp_path / "o.ipynb")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=terminal, timeout=120,
        )  # fmt: skip
    finally:
        os.close(terminal)
        reader.join(timeout=10)
        os.close(main_fd)
    shown = b"".join(chunks).decode(errors="replace")
    assert ran.returncode == 1, shown
    assert "cell 3: error: ZeroDivisionError: division by zero" in shown or "(3/3): error" in shown, shown
    if tqdm == "installed":
        assert "nb-cudaguard run:" in shown and "3/3" in shown and "cell 1 (1/3): ok" not in shown, shown
        assert "\r" in shown  # the bar redraws in place
    else:
        assert "cell 1 (1/3): ok" in shown and "cell 3 (3/3): error" in shown and "nb-cudaguard run:" not in shown


def _drain(fd: int, chunks: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's last writer closed it
            return
        if not chunk:
            return
        chunks.append(chunk)
