# family: bce_input_range
# variable: logits
# BCELoss applied to a raw Linear output (no sigmoid).
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Linear(8, 1).to(device)
criterion = nn.BCELoss()
x = torch.randn(16, 8) * 5
y = torch.randint(0, 2, (16, 1)).float()
logits = model(x.to(device))
# %%
loss = criterion(logits, y.to(device))
