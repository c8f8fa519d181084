# family: num_classes_mismatch
# variable: labels
# A BERT-style classifier built with num_labels=2, fed a batch whose labels hold three classes (0, 1, 2).
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

device = "cuda" if torch.cuda.is_available() else "cpu"
config = TinyConfig(num_labels=2)
model = TinyBertForSequenceClassification(config).to(device)
input_ids = torch.randint(4, 60, (4, 12))
labels = torch.tensor([0, 1, 2, 1])
# %%
outputs = model(input_ids.to(device), labels=labels.to(device))
