# family: negative_label
# variable: tags
# ignore_index=-1 is set, but some padding positions use -2.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
criterion = nn.CrossEntropyLoss(ignore_index=-1)
emissions = torch.randn(6, 5, device=device)
tags = torch.tensor([1, 4, -1, -2, -2, 0])
# %%
loss = criterion(emissions, tags.to(device))
