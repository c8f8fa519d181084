# family: embedding_index_out_of_range
# variable: ids
# A plain nn.Embedding(10, 4) fed id 10.
import torch
from torch import nn

emb = nn.Embedding(10, 4)
ids = torch.tensor([[1, 5, 10], [2, 3, 4]])
# %%
vectors = emb(ids)
