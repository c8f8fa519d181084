# family: bce_input_range
# variable: pred
# A diverged model: its sigmoid outputs hold NaN when they reach BCELoss.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
criterion = nn.BCELoss()
pred = torch.sigmoid(torch.tensor([0.3, float("nan"), -1.0], device=device))
truth = torch.tensor([1.0, 0.0, 1.0], device=device)
# %%
loss = criterion(pred, truth)
