# family: advanced_index_out_of_bounds
# variable: idx
# A tensor of row indices with one index past the end.
import torch

table = torch.randn(10, 3)
idx = torch.tensor([2, 11, 4])
# %%
rows = table[idx]
