"""`nb-cudaguard explain` on what Kaggle and Colab users keep of a failed run: the saved notebook (executed here with
nbclient on a real kernel, the GPU simulated by nb_cudaguard.testing and nothing of nb_cudaguard loaded in it) and
Kaggle's log of a committed run (a JSON list of stream records)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from nb_cudaguard.incident.savedlog import read_saved

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CELLS = [
    "import nb_cudaguard.testing\nnb_cudaguard.testing.enable()  # stands in for the GPU; the extension is not loaded",
    "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\nNUM_CLASSES = 10\n"
    "labels = torch.arange(64) % NUM_CLASSES\nprint('label range', int(labels.min()), int(labels.max()))",
    "class Net(nn.Module):\n    def __init__(self, num_classes):\n        super().__init__()\n"
    "        self.head = nn.Linear(16, num_classes)\n\n    def forward(self, x):\n        return self.head(x)\n\n\n"
    "model = Net(num_classes=9).cuda()",
    "x = torch.randn(64, 16).cuda()\nloss = F.cross_entropy(model(x), labels.cuda())\nloss.backward()",
    "print('never runs')",
]


def _explain(path: Path, *extra: str) -> dict:
    command = [sys.executable, "-m", "nb_cudaguard", "explain", str(path), "--json", *extra]
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module")
def saved_notebook(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# training"), *map(nbformat.v4.new_code_cell, CELLS)]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    path = tmp_path_factory.mktemp("saved") / "train.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.kernel
def test_a_saved_notebook_is_read_as_its_outputs_and_its_cells_code(saved_notebook):
    nb = nbformat.read(saved_notebook, as_version=4)
    assert [o.output_type for o in nb.cells[4].outputs] == ["error"]  # the device assertion went to the kernel's fd 2
    report = _explain(saved_notebook)
    assert report["incident"]["classification"] == "poisoned"
    assert report["incident"]["exc_type"] in ("AcceleratorError", "RuntimeError")
    top = report["causes"][0]
    assert top["family"] == "num_classes_mismatch"
    said = [e["text"] for e in top["evidence"] if e["kind"] == "source"]
    assert any("Net(num_classes=9)" in text and "NUM_CLASSES = 10" in text for text in said), top["evidence"]


@pytest.mark.kernel
def test_code_given_with_code_replaces_the_notebook_s_own(saved_notebook, tmp_path):
    other = tmp_path / "other.py"
    other.write_text("import torch\n")
    top = _explain(saved_notebook, "--code", str(other))["causes"][0]
    assert not any(e["kind"] == "source" for e in top["evidence"])


@pytest.mark.kernel
def test_the_notebook_stops_at_its_failing_cell(saved_notebook):
    saved = read_saved(saved_notebook.read_text())
    assert saved.kind == "notebook" and saved.code is not None
    assert "label range 0 9" in saved.text and "Traceback" not in saved.text.split("label range")[0]
    assert "never runs" not in saved.code and "F.cross_entropy" in saved.code


def test_kaggle_s_log_of_a_run_reads_as_the_log_it_holds(tmp_path):
    entry = "ms_swift_3267"  # a dev log with an assertion, frames (torchrun's, under [rank0]:) and an exception line
    log = (CORPUS / f"{entry}.log").read_text()
    records = [
        {"stream_name": "stderr" if i % 3 else "stdout", "time": 4.5 + i, "data": line}
        for i, line in enumerate(log.splitlines(keepends=True))
    ]
    kaggle, plain = tmp_path / "run.log", tmp_path / "plain.log"
    kaggle.write_text(json.dumps(records))
    plain.write_text(log)
    assert read_saved(kaggle.read_text()).text == log
    as_kaggle, as_plain = _explain(kaggle), _explain(plain)
    assert as_kaggle["causes"] and as_kaggle["causes"] == as_plain["causes"]
    assert as_kaggle["incident"]["exc_type"] == as_plain["incident"]["exc_type"] != "(no exception found)"


@pytest.mark.parametrize(
    "raw",
    ['{"cells": "not a list"}', "[1, 2, 3]", "[]", '{"nbformat": 4}', '[{"data": "no stream name"}]', "{not json"],
    ids=["cells-not-a-list", "numbers", "empty-list", "no-cells", "records-without-streams", "broken-json"],
)
def test_json_that_is_neither_is_read_as_the_text_it_is(raw):
    saved = read_saved(raw)
    assert (saved.text, saved.code, saved.kind) == (raw, None, "text")


def test_a_notebook_without_a_failing_cell_gives_every_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("a = 1"), nbformat.v4.new_code_cell("b = 2")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stderr", text=["warn", "ing\n"])]
    saved = read_saved(nbformat.writes(nb))
    assert (saved.text, saved.code, saved.kind) == ("warning\n", "a = 1\n\nb = 2", "notebook")
