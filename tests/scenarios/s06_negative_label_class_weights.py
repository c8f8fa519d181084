# family: negative_label
# variable: targets
# Class-weighted cross-entropy with -1 used as "no label".
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
weights = torch.tensor([1.0, 2.0, 0.5])
criterion = nn.CrossEntropyLoss(weight=weights.to(device))
scores = torch.randn(4, 3, device=device)
targets = torch.tensor([2, -1, 0, 1], device=device)
# %%
loss = criterion(scores, targets)
