# family: position_ids_too_long
# variable: input_ids
# A sequence of 24 tokens for a model with max_position_embeddings=16, without truncation.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinyBertForSequenceClassification(TinyConfig(max_position_embeddings=16)).to(device)
input_ids = torch.randint(4, 60, (2, 24), device=device)
# %%
logits = model(input_ids)["logits"]
