# family: gather_scatter_index
# variable: choice
# torch.gather picking column 5 of a 3-column tensor.
import torch

scores = torch.randn(4, 3)
choice = torch.tensor([[0], [2], [5], [1]])
# %%
picked = torch.gather(scores, 1, choice)
