# family: label_out_of_range
# variable: target
# NLL loss on log-probabilities with a stray class id (7) among 5 classes.
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
log_probs = torch.randn(6, 5, device=device).log_softmax(dim=1)
target = torch.tensor([0, 1, 7, 3, 4, 2]).to(device)
# %%
loss = F.nll_loss(log_probs, target)
