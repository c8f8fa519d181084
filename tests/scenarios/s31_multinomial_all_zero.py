# family: multinomial_invalid_probs
# variable: weights
# A row of sampling weights that is all zeros (every candidate masked out).
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
weights = torch.tensor([[0.2, 0.3, 0.5], [0.0, 0.0, 0.0]])
# %%
picks = torch.multinomial(weights.to(device), 1)
