# family: dtype_mismatch
# variable: ids
# Token ids kept as floats when they reach an embedding.
import torch
from torch import nn

embed = nn.Embedding(20, 4)
ids = torch.tensor([[1.0, 2.0, 3.0]])
# %%
vectors = embed(ids)
