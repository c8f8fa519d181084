# family: one_hot_num_classes
# variable: labels
# F.one_hot with num_classes=3 for labels that include 3.
import torch
import torch.nn.functional as F

n_classes = 3
labels = torch.tensor([0, 2, 3, 1])
# %%
encoded = F.one_hot(labels, num_classes=n_classes)
