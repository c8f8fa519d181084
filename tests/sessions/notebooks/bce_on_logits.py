# A churn model on tabular features in plain PyTorch with `nn.BCELoss`. The training loop applies the sigmoid;
# the validation cell written later feeds the raw logits to the same loss.

# %% tags=["setup"]
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

np.random.seed(0)
torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# %% tags=["setup"]
features = np.random.randn(256, 12)
churned = (features[:, 0] + 0.5 * features[:, 3] > 0).astype(np.float64)
X_train = torch.tensor(features[:192], dtype=torch.float32)
y_train = torch.tensor(churned[:192], dtype=torch.float32)
X_val = torch.tensor(features[192:], dtype=torch.float32)
y_val = torch.tensor(churned[192:], dtype=torch.float32)
loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32, shuffle=True)

# %% tags=["setup"]
model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
model = model.cuda() if torch.cuda.is_available() else model
criterion = nn.BCELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
history = []

# %% tags=["train"]
for epoch in range(4):
    model.train()
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = criterion(torch.sigmoid(model(xb)).squeeze(1), yb)
        loss.backward()
        optimizer.step()
    history.append(loss.item())
print("losses", [round(v, 4) for v in history])
with open("train_log.txt", "a") as log:
    log.write(f"{history}\n")

# %% tags=["bug"]
model.eval()
with torch.no_grad():
    val_logits = model(X_val.to(device)).squeeze(1)
    val_loss = criterion(val_logits, y_val.to(device))
print("val loss", val_loss.item())

# %% tags=["fix"]
model.eval()
with torch.no_grad():
    val_logits = model(X_val.to(device)).squeeze(1)
    val_loss = criterion(torch.sigmoid(val_logits), y_val.to(device))
print("val loss", val_loss.item())

# %% tags=["after"]
predicted = (torch.sigmoid(val_logits) > 0.5).float().cpu()
print(f"val accuracy {(predicted == y_val).float().mean().item():.3f}, val loss {val_loss.item():.4f}")
