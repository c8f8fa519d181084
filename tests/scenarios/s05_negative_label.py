# family: negative_label
# variable: labels
# Missing labels encoded as -1 while CrossEntropyLoss ignores only -100.
import torch
from torch import nn

criterion = nn.CrossEntropyLoss()
logits = torch.randn(5, 4)
labels = torch.tensor([0, 3, -1, 2, -1])
# %%
loss = criterion(logits, labels)
