# family: token_type_ids_out_of_range
# variable: segment_ids
# Three segments (0, 1, 2) for a model with type_vocab_size=2.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinyBertForSequenceClassification(TinyConfig(type_vocab_size=2)).to(device)
ids = torch.randint(4, 60, (1, 9))
segment_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2, 2]])
# %%
outputs = model(ids.to(device), segment_ids.to(device))
