# family: label_out_of_range
# variable: labels
# Two classes written as 1 and 2 (1-based) for a model with num_labels=2; the labels are made on the GPU.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
model = TinyBertForSequenceClassification(TinyConfig(num_labels=2)).to(device)
ratings = [1, 2, 2, 1]
input_ids = torch.randint(4, 60, (4, 12), device=device)
labels = torch.tensor(ratings, device=device)
# %%
outputs = model(input_ids, labels=labels)
