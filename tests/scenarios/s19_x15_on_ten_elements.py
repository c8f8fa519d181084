# family: advanced_index_out_of_bounds
# variable: x
# x[15] on a 10-element tensor.
import torch

x = torch.arange(10)
# %%
value = x[15]
