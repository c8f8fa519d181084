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
