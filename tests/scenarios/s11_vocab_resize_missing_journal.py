# family: vocab_resize_missing
# variable: input_ids
# The tokens were added in an earlier cell; the failing cell looks innocent.
from tinyhf import TinyBertForSequenceClassification, TinyConfig, TinyTokenizer

tokenizer = TinyTokenizer([f"w{i}" for i in range(28)])
model = TinyBertForSequenceClassification(TinyConfig(vocab_size=len(tokenizer)))
# %%
tokenizer.add_tokens(["[ENT]", "[/ENT]"])
# %%
input_ids = tokenizer(["w1 [ENT] w5 [/ENT] w9"])["input_ids"]
# %%
logits = model(input_ids)["logits"]
