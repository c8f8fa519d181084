# family: vocab_resize_missing
# variable: enc['input_ids']
# New tokens added to the tokenizer; the model's embedding was never resized.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig, TinyTokenizer

device = "cuda" if torch.cuda.is_available() else "cpu"
words = [f"w{i}" for i in range(60)]
tokenizer = TinyTokenizer(words)
model = TinyBertForSequenceClassification(TinyConfig(vocab_size=tokenizer.vocab_size)).to(device)
tokenizer.add_tokens(["<user>", "<bot>"])
enc = tokenizer(["<user> w1 w2 <bot> w3"])
# %%
outputs = model(enc["input_ids"].to(device))
