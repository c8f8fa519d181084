# family: one_hot_num_classes
# variable: labels
# F.one_hot with num_classes=3 for labels that include 3: a device assert on CUDA, which skips the host check.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
n_classes = 3
labels = torch.tensor([0, 2, 3, 1], device=device)
# %%
encoded = F.one_hot(labels, num_classes=n_classes)
