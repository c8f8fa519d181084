# family: position_ids_too_long
# variable: source_ids
# An encoder-decoder fed source documents longer than max_position_embeddings.
import torch
from tinyhf import TinyConfig, TinySeq2Seq

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinySeq2Seq(TinyConfig(max_position_embeddings=16)).to(device)
source_ids = torch.randint(4, 60, (2, 50)).to(device)
target_ids = torch.randint(4, 60, (2, 8)).to(device)
# %%
loss = model(source_ids, target_ids)
