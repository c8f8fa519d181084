# family: multinomial_invalid_probs
# variable: probs
# Text generation with temperature sampling; the toy language model's logits have diverged to inf, so softmax gives NaN.
import torch
import torch.nn as nn
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
vocab_size, dim = 50, 16
lm = nn.Sequential(nn.Embedding(vocab_size, dim), nn.Linear(dim, vocab_size)).to(device)
with torch.no_grad():
    lm[1].weight.fill_(float("inf"))  # what a diverged run leaves in the head
prompt = torch.tensor([[3, 7, 9]], device=device)
temperature = 0.8
# %%
generated = prompt
for _ in range(5):
    logits = lm(generated)[:, -1, :] / temperature
    probs = F.softmax(logits, dim=-1)
    next_id = torch.multinomial(probs, num_samples=1)
    generated = torch.cat([generated, next_id], dim=1)
print(generated.tolist())
