# family: label_out_of_range
# variable: mask
# Semantic segmentation: the masks mark unlabelled pixels with 255 and the loss does not ignore them.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
logits = torch.randn(2, 3, 8, 8, device=device)
mask = torch.randint(0, 3, (2, 8, 8))
mask[0, :2, :2] = 255
# %%
loss = F.cross_entropy(logits, mask.to(device))
