# family: dtype_mismatch
# variable: labels
# Class labels stored as floats (read from a CSV) fed to cross_entropy: a host-side dtype check, also on CUDA.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
logits = torch.randn(3, 4, device=device)
labels = torch.tensor([0.0, 1.0, 3.0], device=device)
# %%
loss = F.cross_entropy(logits, labels)
