# family: position_ids_too_long
# variable: labels
# An encoder-decoder whose labels (decoder side) are longer than its position embeddings.
import torch
from tinyhf import TinyConfig, TinySeq2Seq

model = TinySeq2Seq(TinyConfig(max_position_embeddings=16))
input_ids = torch.randint(4, 60, (2, 10))
labels = torch.randint(4, 60, (2, 40))
# %%
loss = model(input_ids, labels)
