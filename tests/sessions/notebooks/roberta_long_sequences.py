# A topic classifier: a RoBERTa from a small config and a word-level tokenizer built in memory with `tokenizers`.
# Trained on sequences truncated to 32 tokens; the long documents of the last cell are tokenized without
# truncation, so their position ids run past `max_position_embeddings`.

# %% tags=["setup"]
import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForSequenceClassification

torch.manual_seed(0)
random.seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# %% tags=["setup"]
words = "goal match team player score win lose election vote party law court market stock price bank rate".split()
vocab = {w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>", *words])}
backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=backend,
    bos_token="<s>",
    eos_token="</s>",
    pad_token="<pad>",
    unk_token="<unk>",
    model_input_names=["input_ids", "attention_mask"],
)
topics = [words[:7], words[7:12], words[12:]]
docs, topic_ids = [], []
for _ in range(48):
    topic = random.randrange(3)
    docs.append(" ".join(random.choices(topics[topic], k=random.randint(8, 40))))
    topic_ids.append(topic)

# %% tags=["setup"]
config = RobertaConfig(
    vocab_size=len(vocab),
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=34,  # 32 positions + RoBERTa's padding offset
    pad_token_id=1,
    num_labels=3,
)
model = RobertaForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
history = []

# %% tags=["train"]
model.train()
for epoch in range(2):
    for i in range(0, len(docs), 16):
        batch = tokenizer(docs[i : i + 16], padding=True, truncation=True, max_length=32, return_tensors="pt")
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = torch.tensor(topic_ids[i : i + 16]).to(device)
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    print(f"epoch {epoch} loss {loss.item():.4f}")
with open("train_log.txt", "a") as log:
    log.write(f"{len(history)} steps\n")

# %% tags=["bug"]
long_docs = [" ".join(random.choices(topics[0], k=48)), " ".join(random.choices(topics[2], k=60))]
enc = tokenizer(long_docs, padding=True, return_tensors="pt").to(device)
model.eval()
with torch.no_grad():
    predicted = model(**enc).logits.argmax(-1)
print(predicted.tolist())

# %% tags=["fix"]
long_docs = [" ".join(random.choices(topics[0], k=48)), " ".join(random.choices(topics[2], k=60))]
enc = tokenizer(long_docs, padding=True, truncation=True, max_length=32, return_tensors="pt").to(device)
model.eval()
with torch.no_grad():
    predicted = model(**enc).logits.argmax(-1)
print(predicted.tolist())

# %% tags=["after"]
print("predicted", predicted.tolist(), "after", len(history), "steps, last loss", round(history[-1], 3))
torch.save(model.state_dict(), "roberta_topics.pt")
