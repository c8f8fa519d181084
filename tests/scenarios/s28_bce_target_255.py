# family: bce_target_range
# variable: mask
# Binary segmentation with a 0/255 mask fed to binary_cross_entropy.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
probs = torch.rand(2, 1, 4, 4, device=device)
mask = (torch.rand(2, 1, 4, 4) > 0.5).float() * 255
# %%
loss = F.binary_cross_entropy(probs, mask.to(device))
