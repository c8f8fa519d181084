# family: dtype_mismatch
# variable: yb
# Tabular classifier: the label column was read as float64 from the CSV (it had missing values once), then torch.tensor(df.values).
import numpy as np
import pandas as pd
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
df = pd.DataFrame(np.random.rand(64, 5), columns=[f"f{i}" for i in range(5)])
df["label"] = np.random.randint(0, 3, 64).astype("float64")
X = torch.tensor(df.drop(columns="label").values, dtype=torch.float32)
y = torch.tensor(df["label"].values)
model = nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
criterion = nn.CrossEntropyLoss()
# %%
for i in range(0, len(X), 16):
    xb, yb = X[i : i + 16].to(device), y[i : i + 16].to(device)
    loss = criterion(model(xb), yb)
