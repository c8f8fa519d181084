# family: negative_label
# variable: labels
# Missing labels encoded as -1 while CrossEntropyLoss ignores only -100.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
criterion = nn.CrossEntropyLoss()
logits = torch.randn(5, 4, device=device)
labels = torch.tensor([0, 3, -1, 2, -1]).to(device)
# %%
loss = criterion(logits, labels)
