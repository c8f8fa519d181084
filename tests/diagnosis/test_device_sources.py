"""The CPU source of device values is followed through the ops made on the device after the copies (issue 31 point
4): a torchvision-style notebook moves each folder's 1-based labels to the GPU as it loads them, concatenates them
there and shuffles them with a permutation made on the host; another stacks per-sample labels on the device and
takes a batch by slicing. After the device-side assert nothing on the (simulated) GPU can be read; the labels'
values are read from the host tensors the copies came from, made again through the same ops.

Through a real IPython shell with the extension loaded and the simulated GPU on, cell by cell as a user runs them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

TWO_FOLDERS = (
    """import numpy as np
import torch
import torch.nn as nn
%cudaguard simulate on
np.random.seed(0)
torch.manual_seed(0)
device = torch.device("cuda")
# two ImageFolder-style sources, both numbering their 10 classes from 1, moved to the GPU as they load
labels_a = torch.from_numpy(np.random.randint(1, 11, 40)).to(device)
labels_b = torch.randint(1, 11, (40,)).to(device)
images = torch.cat([torch.rand(40, 3, 8, 8).to(device), torch.rand(40, 3, 8, 8).to(device)])
labels = torch.cat([labels_a, labels_b])
perm = torch.randperm(len(labels))
images, labels = images[perm], labels[perm]
class_names = ["plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
def to_name(label):
    return class_names[label - 1]  # the folders' lists start at 1""",
    "model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).to(device)\ncriterion = nn.CrossEntropyLoss()",
    "loss = criterion(model(images), labels)\nloss.backward()",
)

STACKED = (
    """import torch
import torch.nn.functional as F
%cudaguard simulate on
device = torch.device("cuda")
per_sample = [torch.tensor(i % 7).to(device) for i in range(32)]  # 7 tags, one of them past the head
tags = torch.stack(per_sample)
logits = torch.randn(32, 6).to(device)""",
    "out, batch = logits[8:24], tags[8:24]\nloss = F.cross_entropy(out, batch)",
)


def _run(shell, cells):
    from nb_cudaguard import get_guard, testing

    for cell in cells:
        result = shell.run_cell(cell)
        if result.error_in_exec is not None:
            break
    assert testing.is_poisoned(), result.error_in_exec
    return get_guard().last_report.diagnosis


def _read(diagnosis):
    top = diagnosis.causes[0]
    return top, next((e for e in top.evidence if e.kind == "tensor" and e.values), None)


def test_labels_concatenated_and_permuted_on_the_device_are_read_from_their_host_sources(shell):
    diagnosis = _run(shell, TWO_FOLDERS)
    top, read = _read(diagnosis)
    assert top.family == "label_out_of_range" and top.variable == "labels", diagnosis.causes
    assert read is not None and set(read.values) == {10}, top.evidence
    # the positions are the permuted device tensor's own: each names a 10 in labels as the GPU received it (the
    # host labels made again here from the same seeds: the device's copies cannot be read)
    np.random.seed(0)
    torch.manual_seed(0)
    host = torch.cat([torch.from_numpy(np.random.randint(1, 11, 40)), torch.randint(1, 11, (40,))])
    host = host[shell.user_ns["perm"]]
    assert all(int(host[p[0]]) == 10 for p in read.positions), read.positions
    assert "no host copy was found" not in read.text and "the host tensor labels was copied from" in read.text
    negative = next((c for c in diagnosis.causes if c.family == "negative_label"), None)
    assert negative is None or negative.confidence < 0.1, diagnosis.causes  # not from the unrelated `label - 1`


def test_labels_stacked_on_the_device_and_sliced_are_read_from_their_host_sources(shell):
    diagnosis = _run(shell, STACKED)
    top, read = _read(diagnosis)
    assert top.family in ("label_out_of_range", "num_classes_mismatch") and top.variable == "batch", diagnosis.causes
    assert read is not None and set(read.values) == {6}, top.evidence
    assert [p[0] for p in read.positions] == [5, 12], read.positions  # tags[13], tags[20] are the batch's 5th, 12th
