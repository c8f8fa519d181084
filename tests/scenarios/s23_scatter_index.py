# family: gather_scatter_index
# variable: index
# Building one-hot rows with scatter_, one class id past the number of columns.
import torch

index = torch.tensor([[0], [4], [2]])
onehot = torch.zeros(3, 4)
# %%
onehot.scatter_(1, index, 1.0)
