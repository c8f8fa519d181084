# family: advanced_index_out_of_bounds
# variable: idx
# A tensor of row indices with one index past the end.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
table = torch.randn(10, 3, device=device)
idx = torch.tensor([2, 11, 4]).to(device)
# %%
rows = table[idx]
