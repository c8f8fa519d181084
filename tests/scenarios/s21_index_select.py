# family: advanced_index_out_of_bounds
# variable: keep
# index_select with an index equal to the dimension's size.
import torch

feats = torch.randn(6, 4)
keep = torch.tensor([0, 2, 6])
# %%
picked = feats.index_select(0, keep)
