# family: multinomial_invalid_probs
# variable: scores
# Raw scores with negative values passed to multinomial instead of softmax probabilities.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
scores = torch.tensor([[2.0, -1.5, 0.3]], device=device)
# %%
sample = scores.multinomial(1)
