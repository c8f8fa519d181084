"""On a real GPU: a real device-side assert poisons the context and its line is captured; a real OOM does not."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.kernel]


def test_real_device_assert_is_poisoned_and_captured(kernel):
    setup = "import torch\nlogits = torch.randn(8, 5, device='cuda')\nlabels = torch.arange(8, device='cuda')"
    assert kernel.run(setup).status == "ok"
    failed = kernel.run("loss = torch.nn.functional.cross_entropy(logits, labels)\nloss.item()")
    assert failed.status == "error"
    data = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert data["classification"] == "poisoned"
    assert data["incident"]["health"]["source"] == "cuda"
    assert any("t < n_classes" in a["condition"] for a in data["assertions"])
    assert data["causes"][0]["family"] in ("label_out_of_range", "num_classes_mismatch")
    assert kernel.run("torch.ones(1, device='cuda').item()").status == "error"  # sticky


def test_real_out_of_memory_is_recoverable(kernel):
    kernel.run("import torch\nfree, total = torch.cuda.mem_get_info()")
    failed = kernel.run("x = torch.empty(int(total * 2), dtype=torch.uint8, device='cuda')")
    assert failed.status == "error"
    data = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert data["classification"] == "recoverable"
    assert kernel.run("print(torch.ones(1, device='cuda').item())").stdout == "1.0\n"


def test_real_one_hot_out_of_range_poisons(kernel):
    """Onehot.cpp checks the values on the host only for CPU tensors; on CUDA the scatter's device assert fires."""
    kernel.run("import torch\nimport torch.nn.functional as F\nlabels = torch.tensor([0, 3], device='cuda')")
    failed = kernel.run("F.one_hot(labels, 3)\ntorch.cuda.synchronize()")
    assert failed.status == "error"
    data = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert data["classification"] == "poisoned"
    assert any("index out of bounds" in a["condition"] for a in data["assertions"])
    assert data["causes"][0]["family"] == "one_hot_num_classes"


def test_real_float_target_is_a_host_side_error_and_the_context_survives(kernel):
    kernel.run(
        "import torch\nlogits = torch.randn(3, 4, device='cuda')\nlabels = torch.tensor([0., 1., 3.], device='cuda')"
    )
    failed = kernel.run("torch.nn.functional.cross_entropy(logits, labels)")
    assert failed.status == "error" and "expected target dtype to be Long or Byte" in failed.error["evalue"]
    data = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert data["classification"] != "poisoned"
    assert kernel.run("print(torch.ones(1, device='cuda').item())").stdout == "1.0\n"


def test_real_poisoned_values_are_not_read_by_the_diagnosis(kernel):
    """After a real device assert the report quotes the host copy, never the CUDA tensor's values."""
    setup = (
        "import torch\nhost = torch.tensor([0, 1, 7, 2])\nlabels = host.to('cuda')\n"
        "logits = torch.randn(4, 5, device='cuda')"
    )
    assert kernel.run(setup).status == "ok"
    assert kernel.run("loss = torch.nn.functional.cross_entropy(logits, labels)\nloss.item()").status == "error"
    data = json.loads(kernel.run("%cudaguard report --json").stdout)
    assert data["classification"] == "poisoned"
    tensor = [e for c in data["causes"] for e in c["evidence"] if e.get("values") and e["kind"] == "tensor"]
    assert tensor and all(not e["direct"] for e in tensor)  # read from the host copy, marked inferred
    assert all("values not read" in e["text"] or "host copy" in e["text"] for e in tensor)


def test_real_name_error_after_cuda_started_gets_no_report(kernel):
    """Every GPU session initialises CUDA; a healthy probe after a typo says nothing about the typo."""
    assert kernel.run("import torch\nx = torch.randn(4, 4, device='cuda')\ntorch.cuda.synchronize()").status == "ok"
    failed = kernel.run("print(lables)")
    assert failed.status == "error" and failed.error["ename"] == "NameError"
    shown = [o for o in failed.outputs if o["output_type"] in ("display_data", "execute_result")]
    assert not shown and "nb_cudaguard" not in failed.stdout + failed.stderr, failed.outputs
    assert "no failing cell recorded yet" in kernel.run("%cudaguard report --json").stdout
    assert kernel.run("print(x.sum().item() == x.sum().item())").stdout == "True\n"


def test_real_fast_checks_stop_a_bad_token_id_and_a_bad_label_on_a_training_step(kernel):
    """``%cudaguard check on`` on a real embedding + cross-entropy step: the bad id is stopped with its family and
    variable, the context stays healthy, and the step runs once the ids are fixed."""
    setup = (
        "import torch, torch.nn as nn, torch.nn.functional as F\n"
        "emb = nn.Embedding(100, 16).cuda()\nhead = nn.Linear(16, 5).cuda()\n"
        "opt = torch.optim.AdamW([*emb.parameters(), *head.parameters()])\n"
        "ids = torch.randint(0, 100, (32, 8), device='cuda')\nlabels = torch.randint(0, 5, (32,), device='cuda')\n"
        "def step(ids, labels):\n"
        "    opt.zero_grad()\n"
        "    loss = F.cross_entropy(head(emb(ids).mean(1)), labels)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    return loss"
    )
    assert kernel.run(setup).status == "ok"
    assert kernel.run("%cudaguard check on").status == "ok"
    assert kernel.run("step(ids, labels)").status == "ok"
    bad_ids = kernel.run("bad = ids.clone()\nbad[3, 2] = 120\nstep(bad, labels)")
    assert bad_ids.status == "error" and bad_ids.error["ename"].endswith("CheckError"), bad_ids.error
    said = kernel.run("import sys\nprint(sys.last_value.family, sys.last_value.variable)").stdout.split()
    assert said[0] == "embedding_index_out_of_range" and said[1] in ("bad", "ids"), said
    bad_labels = kernel.run("step(ids, labels + 5)")
    assert bad_labels.status == "error" and bad_labels.error["ename"].endswith("CheckError"), bad_labels.error
    said = kernel.run("print(sys.last_value.family)").stdout.split()
    assert said[0] in ("label_out_of_range", "num_classes_mismatch"), said
    healthy = kernel.run("print(step(ids, labels).item() > 0, torch.ones(1, device='cuda').item())")
    assert healthy.status == "ok" and healthy.stdout == "True 1.0\n", healthy.outputs


def _free_device_memory() -> int:
    """The device's free memory, read by a fresh process (which holds only its own context meanwhile)."""
    import subprocess
    import sys

    code = "import torch; print(torch.cuda.mem_get_info()[0])"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_real_restart_frees_the_device_memory(kernel):
    """The poisoned context and everything it held are gone after ``%cudaguard restart``: the same PID, with the
    device memory back (its driver files closed on exec)."""
    baseline = _free_device_memory()
    hold = "import torch\nbig = torch.empty(2 * 1024**3, dtype=torch.uint8, device='cuda')\ntorch.cuda.synchronize()"
    assert kernel.run(hold).status == "ok"
    held = _free_device_memory()
    assert baseline - held >= 2 * 1024**3, (baseline, held)
    failed = kernel.run(
        "labels = torch.tensor([0, 9], device='cuda')\ntorch.nn.functional.one_hot(labels, 3).sum().item()"
    )
    assert failed.status == "error"
    pid = kernel.run("import os\nprint(os.getpid())").stdout
    assert kernel.run("%cudaguard restart --replay none", timeout=120).status == "ok"
    assert kernel.run("import os\nprint(os.getpid())", timeout=120).stdout == pid
    freed = _free_device_memory()
    assert freed >= baseline - 256 * 1024**2, (baseline, held, freed)
