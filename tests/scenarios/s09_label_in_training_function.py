# family: label_out_of_range
# variable: batch['y']
# The loss runs inside a training-step function; the batch is a dict moved to the GPU entry by entry.
import torch
import torch.nn.functional as F
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(8, 4).to(device)
batch = {"x": torch.randn(3, 8), "y": torch.tensor([1, 9, 2])}
batch = {key: value.to(device) for key, value in batch.items()}


def train_step(model, batch):
    logits = model(batch["x"])
    return F.cross_entropy(logits, batch["y"])


# %%
loss = train_step(model, batch)
