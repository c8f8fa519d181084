# family: vocab_resize_missing
# variable: input_ids
# The tokens were added in an earlier cell; the failing cell looks innocent; the ids live on the GPU only.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig, TinyTokenizer

device = "cuda" if torch.cuda.is_available() else "cpu"
tokenizer = TinyTokenizer([f"w{i}" for i in range(28)])
model = TinyBertForSequenceClassification(TinyConfig(vocab_size=len(tokenizer))).to(device)
# %%
tokenizer.add_tokens(["[ENT]", "[/ENT]"])
# %%
input_ids = tokenizer(["w1 [ENT] w5 [/ENT] w9"])["input_ids"].to(device)
# %%
logits = model(input_ids)["logits"]
