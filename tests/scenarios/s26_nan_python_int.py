# family: nan_or_inf
# variable: position
# A NaN converted to a Python int index.
import torch

position = torch.tensor([float("nan")])
sequence = torch.arange(5)
# %%
token = sequence[int(position.item())]
