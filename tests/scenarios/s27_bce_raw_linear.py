# family: bce_input_range
# variable: logits
# BCELoss applied to a raw Linear output (no sigmoid).
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(8, 1)
criterion = nn.BCELoss()
x = torch.randn(16, 8) * 5
y = torch.randint(0, 2, (16, 1)).float()
logits = model(x)
# %%
loss = criterion(logits, y)
