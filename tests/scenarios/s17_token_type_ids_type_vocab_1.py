# family: token_type_ids_out_of_range
# variable: token_type_ids
# token_type_ids of 2 fed to a RoBERTa-style model with type_vocab_size=1.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinyBertForSequenceClassification(TinyConfig(type_vocab_size=1)).to(device)
input_ids = torch.randint(4, 60, (1, 8), device=device)
token_type_ids = torch.tensor([[0, 0, 0, 0, 2, 2, 2, 2]], device=device)
# %%
outputs = model(input_ids, token_type_ids=token_type_ids)
