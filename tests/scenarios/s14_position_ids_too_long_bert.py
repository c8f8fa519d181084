# family: position_ids_too_long
# variable: input_ids
# A sequence of 24 tokens for a model with max_position_embeddings=16, without truncation.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

model = TinyBertForSequenceClassification(TinyConfig(max_position_embeddings=16))
input_ids = torch.randint(4, 60, (2, 24))
# %%
logits = model(input_ids)["logits"]
