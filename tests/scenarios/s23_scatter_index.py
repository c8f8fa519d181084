# family: gather_scatter_index
# variable: idx
# Summing rows per group with scatter_add_, one group id past the 4 rows of the result.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
counts = torch.zeros(4, 3, device=device)
m = torch.ones(3, 3, device=device)
idx = torch.tensor([0, 4, 2], device=device).unsqueeze(1)
# %%
counts.scatter_add_(0, idx.expand_as(m), m)
