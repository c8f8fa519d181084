# family: negative_label
# variable: yb
# Labels mapped from names with a dict; names missing from the mapping become -1 ("unknown") and stay in the data.
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
df = pd.DataFrame({"x": range(48), "species": ["cat", "dog", "bird", "fox"] * 12})
class_to_idx = {"cat": 0, "dog": 1, "bird": 2}
df["target"] = df["species"].map(class_to_idx).fillna(-1).astype(int)
features = torch.randn(len(df), 8)
targets = torch.tensor(df["target"].values)
dl = DataLoader(TensorDataset(features, targets), batch_size=12, shuffle=True)
net = nn.Linear(8, len(class_to_idx)).to(device)
loss_fn = nn.CrossEntropyLoss()
# %%
for xb, yb in dl:
    xb = xb.to(device)
    yb = yb.to(device)
    loss = loss_fn(net(xb), yb)
    loss.backward()
