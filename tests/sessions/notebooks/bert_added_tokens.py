# An intent classifier for chat logs: a BERT from a small config, trained with a plain PyTorch loop. The chat
# markers are added to the tokenizer after the model was built, and `resize_token_embeddings` is forgotten.

# %% tags=["setup"]
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# %% tags=["setup"]
words = "hi hello please book a table for two tonight cancel my order where is refund thanks bye".split()
with open("vocab.txt", "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
tokenizer = BertTokenizerFast("vocab.txt")
config = BertConfig(
    vocab_size=len(tokenizer),
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    num_labels=3,
)
model = BertForSequenceClassification(config)
model.to(device)
tokenizer.add_special_tokens({"additional_special_tokens": ["[USER]", "[BOT]"]})
print(len(tokenizer), "tokens,", model.config.vocab_size, "embedding rows")

# %% tags=["setup"]
utterances = [" ".join(random.choices(words, k=random.randint(3, 10))) for _ in range(64)]
intents = torch.tensor([random.randrange(3) for _ in utterances])
enc = tokenizer(utterances, padding="max_length", truncation=True, max_length=16, return_tensors="pt")
train_loader = DataLoader(TensorDataset(enc["input_ids"], enc["attention_mask"], intents), batch_size=16, shuffle=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
history = []

# %% tags=["train"]
model.train()
for epoch in range(2):
    for input_ids, attention_mask, labels in train_loader:
        input_ids, attention_mask, labels = input_ids.to(device), attention_mask.to(device), labels.to(device)
        optimizer.zero_grad(set_to_none=True)
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        optimizer.step()
        history.append(out.loss.item())
    print(f"epoch {epoch}: loss {history[-1]:.4f}")
with open("train_log.txt", "a") as log:
    log.write(f"epoch {epoch} loss {history[-1]:.4f}\n")

# %% tags=["bug"]
chats = ["[USER] book a table for two [BOT] thanks", "[USER] where is my refund [BOT] hello"]
batch = tokenizer(chats, padding=True, return_tensors="pt")
batch = {k: v.to(device) for k, v in batch.items()}
model.eval()
with torch.no_grad():
    preds = model(**batch).logits.argmax(-1)
print(preds.tolist())

# %% tags=["fix"]
model.resize_token_embeddings(len(tokenizer))
chats = ["[USER] book a table for two [BOT] thanks", "[USER] where is my refund [BOT] hello"]
batch = tokenizer(chats, padding=True, return_tensors="pt")
batch = {k: v.to(device) for k, v in batch.items()}
model.eval()
with torch.no_grad():
    preds = model(**batch).logits.argmax(-1)
print(preds.tolist())

# %% tags=["after"]
# The last training step's `out` still holds its graph, and with it the word embedding's gradient slot at the old
# size (resize_token_embeddings assigns `weight.data`; torch re-checks that slot's shape, so backward would fail
# with "invalid gradient ... [24, 32] but expected [22, 32]", extension or not): let it go first.
out = None
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the embedding was replaced: a new optimizer
optimizer.zero_grad(set_to_none=True)
model.train()
input_ids, attention_mask, labels = (t.to(device) for t in next(iter(train_loader)))
loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
loss.backward()
optimizer.step()
history.append(loss.item())
print(len(history), "steps; embedding rows:", model.get_input_embeddings().num_embeddings)
