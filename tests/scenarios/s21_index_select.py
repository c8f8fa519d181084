# family: advanced_index_out_of_bounds
# variable: keep
# index_select with an index equal to the dimension's size.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
feats = torch.randn(6, 4, device=device)
keep = torch.tensor([0, 2, 6], device=device)
# %%
picked = feats.index_select(0, keep)
