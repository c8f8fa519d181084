# family: dtype_mismatch
# variable: labels
# Class labels stored as floats (read from a CSV) fed to cross_entropy.
import torch
import torch.nn.functional as F

logits = torch.randn(3, 4)
labels = torch.tensor([0.0, 1.0, 3.0])
# %%
loss = F.cross_entropy(logits, labels)
