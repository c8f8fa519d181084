# family: label_out_of_range
# variable: y_batch
# Labels read from a NumPy array, including a stray 10 for a 10-class head.
import numpy as np
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
y_all = np.array([0, 3, 10, 9, 1, 2])
net = nn.Sequential(nn.Linear(5, 10)).to(device)
x_batch = torch.randn(6, 5, device=device)
y_batch = torch.from_numpy(y_all).to(device)
# %%
loss = nn.functional.cross_entropy(net(x_batch), y_batch)
