"""The extension in real ipykernel kernels driven through jupyter_client, as JupyterLab, VS Code, Colab use it."""

from __future__ import annotations

import json

import pytest

from nb_cudaguard.cli.kernelsession import KernelSession

pytestmark = pytest.mark.kernel

EMBEDDING_SETUP = "import torch\n%cudaguard simulate on\nemb = torch.nn.Embedding(10, 4).to('cuda')\nids = torch.tensor([3, 11]).cuda()"


def _report_json(kernel) -> dict:
    result = kernel.run("%cudaguard report --json")
    assert result.status == "ok" and result.stdout.strip(), (result.status, result.outputs)
    return json.loads(result.stdout)


def _in_order_without_duplicates(lines: list[str], expected: list[str]) -> bool:
    positions = [expected.index(line) for line in lines if line in expected]
    return positions == sorted(set(positions)) and len(positions) == len(lines)


def test_user_output_reaches_the_client_once_in_order_and_is_captured_whole(kernel):
    code = (
        "import os, sys, time\n"
        "for n in range(300):\n"
        "    os.write(1, f'fd {n}\\n'.encode())\n"
        "time.sleep(0.3)  # ipykernel promises no order between C-level and Python-level output\n"
        "for n in range(300):\n"
        "    print(f'py {n}')\n"
        "sys.stdout.flush()\n"
        "for n in range(300):\n"
        "    os.write(2, f'err {n}\\n'.encode())\n"
        "raise RuntimeError('CUDA error: an illegal memory access was encountered')  # an incident: reported\n"
    )
    result = kernel.run(code)
    fd_expected = [f"fd {n}" for n in range(300)]
    err_expected = [f"err {n}" for n in range(300)]
    stdout_lines = [line for line in result.stdout.splitlines() if line]
    # Python-level output goes through OutStream.write on the main thread: exactly once, in order.
    assert [line for line in stdout_lines if line.startswith("py ")] == [f"py {n}" for n in range(300)]
    # C-level output is forwarded by ipykernel's own watcher thread, which (without nb_cudaguard too, measured:
    # 1 run in 15) can drop a line on its way to the client; we check that nothing is duplicated or reordered.
    fd_lines = [line for line in stdout_lines if line.startswith("fd ")]
    err_lines = [line for line in result.stderr.splitlines() if line]
    assert _in_order_without_duplicates(fd_lines, fd_expected) and len(fd_lines) >= 295
    assert _in_order_without_duplicates(err_lines, err_expected) and len(err_lines) >= 295
    # What the capture saw: every line, once, in order.
    tail = json.loads(kernel.run("%cudaguard report --json").stdout)
    seen = kernel.run("print(get_ipython()._nb_cudaguard.incidents[-1].output_tail)").stdout.splitlines()
    assert tail["incident"]["exc_type"] == "RuntimeError"
    assert [line for line in seen if line.startswith("fd ")] == fd_expected
    assert [line for line in seen if line.startswith("err ")] == err_expected


def test_poisoned_context_with_captured_assertion(kernel):
    assert kernel.run(EMBEDDING_SETUP).status == "ok"
    failed = kernel.run("out = emb(ids)")
    assert failed.status == "error" and failed.error["ename"] == "AcceleratorError"
    assert "srcIndex < srcSelectDimSize" in failed.stderr  # the user still sees the device's lines
    assert any("POISONED" in text for text in failed.texts())
    data = _report_json(kernel)
    assert data["classification"] == "poisoned"
    assert data["assertions"][0]["condition"] == "srcIndex < srcSelectDimSize"
    assert data["causes"][0]["family"] == "embedding_index_out_of_range"
    user_frames = [f for f in data["incident"]["frames"] if f["is_user"]]
    assert user_frames[-1]["line"] == "out = emb(ids)"
    assert not data["incident"]["frames"][-1]["is_user"]  # the op raised inside library code
    later = kernel.run("torch.zeros(3, device='cuda').sum()")
    assert later.status == "error" and "device-side assert" in later.error["evalue"]


def test_out_of_memory_is_recoverable(kernel):
    kernel.run("import torch")
    result = kernel.run(
        "raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 15.9 GiB total)')"
    )
    assert result.status == "error"
    assert any("no restart needed" in text for text in result.texts())
    assert _report_json(kernel)["classification"] == "recoverable"
    assert kernel.run("1 + 1").status == "ok"


def test_capture_fd_output_off(kernel_fd_capture_off):
    kernel = kernel_fd_capture_off
    status = kernel.run("%cudaguard status").stdout
    assert "fd 2: fd" in status
    kernel.run(EMBEDDING_SETUP)
    kernel.run("out = emb(ids)")
    data = _report_json(kernel)
    assert data["classification"] == "poisoned"
    assert data["assertions"][0]["count"] == 4


def test_status_says_when_a_cell_redirected_fd_1_and_when_it_was_put_back(kernel, tmp_path):
    """ipykernel's route: fd 1 is the write end of the pipe ipykernel reads; a cell that points it at a file takes
    C-level output (CUDA's assertion lines) away from the capture, and status says so until it is put back."""
    assert "redirected" not in kernel.run("%cudaguard status").stdout
    target = tmp_path / "out.txt"
    redirect = f"import os\nsaved = os.dup(1)\nf = open({str(target)!r}, 'w')\nos.dup2(f.fileno(), 1)"
    assert kernel.run(redirect).status == "ok"
    assert "redirected fd 1" in kernel.run("%cudaguard status").stdout
    assert kernel.run("os.dup2(saved, 1)").status == "ok"
    assert "redirected" not in kernel.run("%cudaguard status").stdout


def test_non_utf8_and_large_output_do_not_break_the_kernel(kernel):
    result = kernel.run("import os\nos.write(2, b'\\xff\\xfe\\xc3(\\n')\nos.write(1, b'z' * 3_000_000 + b'\\n')\n1/0")
    assert result.status == "error"
    assert len(result.stdout) >= 3_000_000
    assert kernel.run("print('alive')").stdout == "alive\n"


def test_cell_closing_fd2_leaves_the_kernel_working(kernel):
    result = kernel.run("import os\nos.close(2)")
    assert result.status == "ok"
    assert kernel.run("print('still here')").stdout == "still here\n"
    assert kernel.run("raise RuntimeError('CUDA error: misaligned address')").status == "error"


def test_unload_mid_session_keeps_state_and_output(kernel):
    kernel.run("x = 41")
    assert kernel.run("%unload_ext nb_cudaguard").status == "ok"
    result = kernel.run("import os; os.write(2, b'raw\\n'); print(x + 1)")
    assert result.stdout == "42\n" and "raw" in result.stderr
    assert kernel.run("%cudaguard status").status == "error"  # the magic is gone
    assert kernel.run("%load_ext nb_cudaguard").status == "ok"


def test_loaded_from_kernel_config():
    with KernelSession(extra_args=["--InteractiveShellApp.extensions=['nb_cudaguard']"]) as kernel:
        assert "cells recorded" in kernel.run("%cudaguard status").stdout
        kernel.run("import torch\nt = torch.ones(2)")
        assert kernel.run("torch.cuda.is_initialized()").texts() == ["False"]


def test_torch_not_installed():
    hide_torch = "import sys; sys.modules['torch'] = None"  # makes `import torch` raise ImportError
    with KernelSession() as kernel:
        kernel.run(hide_torch)
        assert kernel.run("%load_ext nb_cudaguard").status == "ok"
        failed = kernel.run("import torch")
        assert failed.status == "error"
        assert "no failing cell recorded yet" in kernel.run("%cudaguard report --json").stdout  # no incident
        simulate = kernel.run("%cudaguard simulate on")
        assert simulate.status == "error" and "torch" in simulate.error["evalue"]
        assert kernel.run("print('ok')").stdout == "ok\n"
