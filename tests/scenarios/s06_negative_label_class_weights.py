# family: negative_label
# variable: targets
# Class-weighted cross-entropy with -1 used as "no label".
import torch
from torch import nn

weights = torch.tensor([1.0, 2.0, 0.5])
criterion = nn.CrossEntropyLoss(weight=weights)
scores = torch.randn(4, 3)
targets = torch.tensor([2, -1, 0, 1])
# %%
loss = criterion(scores, targets)
