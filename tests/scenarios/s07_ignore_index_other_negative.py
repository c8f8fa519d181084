# family: negative_label
# variable: tags
# ignore_index=-1 is set, but some padding positions use -2.
import torch
from torch import nn

criterion = nn.CrossEntropyLoss(ignore_index=-1)
emissions = torch.randn(6, 5)
tags = torch.tensor([1, 4, -1, -2, -2, 0])
# %%
loss = criterion(emissions, tags)
