# family: multinomial_invalid_probs
# variable: probs
# Sampling the next token from probabilities computed from NaN logits.
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
logits = torch.tensor([[1.0, float("nan"), 0.5, 2.0]], device=device)
probs = torch.softmax(logits, dim=-1)
# %%
next_token = torch.multinomial(probs, num_samples=1)
