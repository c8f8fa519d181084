# family: label_out_of_range
# variable: labels
# Two classes written as 1 and 2 (1-based) for a model with num_labels=2.
import torch
from tinyhf import TinyBertForSequenceClassification, TinyConfig

model = TinyBertForSequenceClassification(TinyConfig(num_labels=2))
input_ids = torch.randint(4, 60, (4, 12))
labels = torch.tensor([1, 2, 2, 1])
# %%
outputs = model(input_ids, labels=labels)
