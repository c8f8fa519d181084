# family: dtype_mismatch
# variable: ids
# Token ids kept as floats when they reach an embedding.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
embed = nn.Embedding(20, 4).to(device)
ids = torch.tensor([[1.0, 2.0, 3.0]], device=device)
# %%
vectors = embed(ids)
