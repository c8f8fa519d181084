# family: num_classes_mismatch
# variable: yb
# A 196-class dataset (Stanford Cars style) with a 195-unit output layer, trained through a DataLoader.
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
num_classes = 196
features = torch.randn(392, 300)
targets = torch.arange(392) % num_classes
loader = DataLoader(TensorDataset(features, targets), batch_size=64, shuffle=False)
model = nn.Sequential(nn.Linear(300, 256), nn.ReLU(), nn.Linear(256, 195)).to(device)
criterion = nn.CrossEntropyLoss()
# %%
for xb, yb in loader:
    xb, yb = xb.to(device), yb.to(device)
    loss = criterion(model(xb), yb)
