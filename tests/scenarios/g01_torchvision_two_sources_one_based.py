# family: label_out_of_range
# variable: yb
# Crops from two folders: the first numbers its 10 classes 1..10, the second 0..9; concatenated, shuffled once, fed to a 10-class CNN.
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
imgs_a, labels_a = torch.rand(40, 3, 16, 16), torch.from_numpy(np.random.randint(1, 11, 40))  # folder A: 1..10
imgs_b, labels_b = torch.rand(40, 3, 16, 16), torch.randint(0, 10, (40,))  # folder B: 0..9
images = torch.cat([imgs_a, imgs_b])
labels = torch.cat([labels_a, labels_b])
perm = torch.randperm(len(labels))
images, labels = images[perm], labels[perm]
labels[0] = 10
loader = DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=False)
last_batch = len(loader) - 1
class_names = ["plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def to_name(label):
    return class_names[label - 1]  # folder A's list starts at 1


# %%
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
# %%
for i, (xb, yb) in enumerate(loader):
    xb, yb = xb.to(device), yb.to(device)
    out = model(xb)
    loss = criterion(out, yb.view(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if i == last_batch:
        print(f"loss {loss.item():.3f}")
