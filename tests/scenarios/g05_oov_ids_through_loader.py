# family: embedding_index_out_of_range
# variable: xb
# A GRU text classifier; the vocabulary comes from the training texts and unknown words get id len(vocab), one past the table.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
train_texts = ["good movie", "bad movie", "great plot", "awful acting"] * 8
test_texts = ["good acting", "terrible movie"] * 8
vocab = {w: i + 1 for i, w in enumerate(sorted({w for t in train_texts for w in t.split()}))}


def encode(t):
    return [vocab.get(w, len(vocab) + 1) for w in t.split()]


test_ids = torch.tensor([encode(t) for t in test_texts])
test_loader = DataLoader(TensorDataset(test_ids), batch_size=8)


class TextRNN(nn.Module):
    def __init__(self, n_words, dim=16):
        super().__init__()
        self.embed = nn.Embedding(n_words, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.fc = nn.Linear(dim, 2)

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        return self.fc(out[:, -1])


model = TextRNN(len(vocab) + 1).to(device)
# %%
preds = []
with torch.no_grad():
    for (xb,) in test_loader:
        xb = xb.to(device)
        preds.append(model(xb).argmax(1).cpu())
