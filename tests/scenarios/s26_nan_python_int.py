# family: nan_or_inf
# variable: position
# A NaN converted to a Python int index.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
position = torch.tensor([float("nan")])
sequence = torch.arange(5, device=device)
# %%
token = sequence[int(position.item())]
