# family: bce_input_range
# variable: pred
# A diverged model: its sigmoid outputs hold NaN when they reach BCELoss.
import torch
from torch import nn

criterion = nn.BCELoss()
pred = torch.sigmoid(torch.tensor([0.3, float("nan"), -1.0]))
truth = torch.tensor([1.0, 0.0, 1.0])
# %%
loss = criterion(pred, truth)
