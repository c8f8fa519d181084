# family: position_ids_too_long
# variable: labels
# An encoder-decoder whose labels (decoder side) are longer than its position embeddings.
import torch
from tinyhf import TinyConfig, TinySeq2Seq

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinySeq2Seq(TinyConfig(max_position_embeddings=16)).to(device)
input_ids = torch.randint(4, 60, (2, 10), device=device)
labels = torch.randint(4, 60, (2, 40), device=device)
# %%
loss = model(input_ids, labels)
