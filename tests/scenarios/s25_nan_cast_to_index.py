# family: nan_or_inf
# variable: idx
# A NaN score turned into a bin index with .long(), then used to index.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
scores = torch.tensor([0.25, float("nan"), 0.75])
bins = torch.zeros(10, device=device)
idx = (scores * 10).long().to(device)
# %%
selected = bins[idx]
