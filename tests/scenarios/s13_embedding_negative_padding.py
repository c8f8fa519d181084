# family: embedding_index_out_of_range
# variable: tokens
# Padding written as -1 into token ids that feed an embedding.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
embedding = nn.Embedding(100, 8).to(device)
tokens = torch.tensor([[5, 17, 42, -1, -1]])
# %%
out = embedding(tokens.to(device))
