# family: advanced_index_out_of_bounds
# variable: x
# x[15] on a 10-element tensor.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.arange(10, device=device)
# %%
value = x[15]
