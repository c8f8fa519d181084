# A bag-of-embeddings review classifier in plain PyTorch. The vocabulary is built from the training texts; words
# it has never seen are given the id `len(vocab)`, one past the embedding table.

# %% tags=["setup"]
import random
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(0)
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# %% tags=["setup"]
good = "great loved superb fun moving brilliant".split()
bad = "awful boring dull waste hated poor".split()
filler = "the film plot cast was and it a".split()
train_texts, train_y = [], []
for _ in range(128):
    y = random.randrange(2)
    train_texts.append(" ".join(random.choices(filler, k=5) + random.choices(good if y else bad, k=2)))
    train_y.append(y)
counts = Counter(w for t in train_texts for w in t.split())
vocab = {w: i for i, (w, _) in enumerate(counts.most_common())}
UNK = len(vocab)


def encode(text, width=12):
    ids = [vocab.get(w, UNK) for w in text.split()][:width]
    return ids + [0] * (width - len(ids))


X = torch.tensor([encode(t) for t in train_texts])
y = torch.tensor(train_y, dtype=torch.float32)


# %% tags=["setup"]
class BagClassifier(nn.Module):
    def __init__(self, vocab_size, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim)
        self.out = nn.Linear(dim, 1)

    def forward(self, ids):
        return self.out(self.emb(ids).mean(1)).squeeze(1)


model = BagClassifier(len(vocab)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
history = []

# %% tags=["train"]
model.train()
for epoch in range(3):
    perm = torch.randperm(len(X))
    for i in range(0, len(X), 32):
        idx = perm[i : i + 32]
        xb, yb = X[idx].to(device), y[idx].to(device)
        loss = F.binary_cross_entropy_with_logits(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    history.append(loss.item())
    print(f"epoch {epoch} loss {loss.item():.4f}")
with open("train_log.txt", "a") as log:
    log.write(f"loss {history[-1]:.4f}\n")

# %% tags=["bug"]
new_reviews = ["the cast was superb", "a truly unwatchable mess"]
ids = torch.tensor([encode(t) for t in new_reviews]).to(device)
model.eval()
with torch.no_grad():
    probs = torch.sigmoid(model(ids))
print(probs.tolist())

# %% tags=["fix"]
new_reviews = ["the cast was superb", "a truly unwatchable mess"]
ids = torch.tensor([[i if i < UNK else 0 for i in encode(t)] for t in new_reviews]).to(device)
model.eval()
with torch.no_grad():
    probs = torch.sigmoid(model(ids))
print(probs.tolist())

# %% tags=["after"]
with torch.no_grad():
    accuracy = ((model(X.to(device)) > 0).float().cpu() == y).float().mean().item()
print(f"train accuracy {accuracy:.3f}, {len(history)} epochs, probs {[round(p, 3) for p in probs.tolist()]}")
