"""The probe never creates a CUDA context; `nb-cudaguard explain` reads logs users already have."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from nb_cudaguard import testing
from nb_cudaguard.cli.main import main
from nb_cudaguard.incident import probe

KAGGLE_LOG = textwrap.dedent(
    """\
    ../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [3,0,0] Assertion `t >= 0 && t < n_classes` failed.
    ../aten/src/ATen/native/cuda/Loss.cu:240: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [9,0,0] Assertion `t >= 0 && t < n_classes` failed.
    ---------------------------------------------------------------------------
    RuntimeError                              Traceback (most recent call last)
    Cell In[12], line 7
          5 outputs = model(images)
          6 loss = criterion(outputs, labels)
    ----> 7 loss.backward()
    File /opt/conda/lib/python3.10/site-packages/torch/_tensor.py:487, in Tensor.backward(self, gradient)
    RuntimeError: CUDA error: device-side assert triggered
    CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
    For debugging consider passing CUDA_LAUNCH_BLOCKING=1.
    Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
    """
)


def test_probe_without_torch_imports_nothing():
    code = (
        "import sys\nfrom nb_cudaguard.incident.probe import CudaProbe\n"
        "h = CudaProbe().check()\nprint(h.state, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["unknown", "False"]


def test_probe_never_initialises_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("CUDA already initialised by an earlier test")
    health = probe.CudaProbe().check()
    assert health.state == "unknown"
    assert not torch.cuda.is_initialized()


def test_fault_injection_probe_has_the_same_interface():
    pytest.importorskip("torch")
    try:
        with pytest.raises(RuntimeError, match="device-side assert triggered"):
            testing.poison("embedding_index_out_of_range")
        health = probe.active_probe().check()
        assert (health.state, health.source) == ("poisoned", "fault_injection")
        assert health.error.startswith("CUDA error: device-side assert triggered")
    finally:
        testing.reset()
    assert isinstance(probe.active_probe(), probe.CudaProbe)


def test_explain_a_kaggle_log(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text(KAGGLE_LOG)
    assert main(["explain", str(log)]) == 0
    text = capsys.readouterr().out
    assert "POISONED" in text
    assert "label_out_of_range" in text
    assert "cell [12], line 7: loss.backward()" in text
    assert "printed 2x" in text


def test_explain_json_shape(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text(KAGGLE_LOG)
    assert main(["explain", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["poisoned"] is True
    assert data["causes"][0]["family"] == "label_out_of_range"
    assert 0 <= data["causes"][0]["confidence"] <= 1
    assert {"family", "confidence", "evidence", "fix"} <= set(data["causes"][0])
    assert data["assertions"][0]["count"] == 2


def test_explain_from_stdin_without_the_assertion_line():
    log = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    out = emb(ids)\n'
    log += "RuntimeError: CUDA error: device-side assert triggered\n"
    done = subprocess.run(
        [sys.executable, "-m", "nb_cudaguard", "explain", "-", "--json"], input=log, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["poisoned"] is True and data["assertions"] == []
    assert data["incident"]["frames"][0]["line"] == "out = emb(ids)"


def test_explain_a_log_with_no_cuda_error(tmp_path, capsys):
    log = tmp_path / "clean.txt"
    log.write_text("epoch 1 loss 0.3\nepoch 2 loss 0.2\n")
    assert main(["explain", str(log)]) == 1
    assert "no CUDA error" in capsys.readouterr().out


def test_explain_a_missing_file(capsys):
    assert main(["explain", "/nonexistent/log.txt"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_out_of_memory_log_is_recoverable(capsys, tmp_path):
    log = tmp_path / "oom.txt"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert main(["explain", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["poisoned"] is False
