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
