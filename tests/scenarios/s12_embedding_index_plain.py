# family: embedding_index_out_of_range
# variable: ids
# A plain nn.Embedding(10, 4) fed id 10.
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(10, 4).to(device)
ids = torch.tensor([[1, 5, 10], [2, 3, 4]], device=device)
# %%
vectors = emb(ids)
