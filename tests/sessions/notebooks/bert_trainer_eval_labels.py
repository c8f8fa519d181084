# A sentiment classifier fine-tuned with transformers' Trainer. The class count is taken from the train split
# only; the validation split has a fourth class ("mixed"), so `trainer.evaluate` feeds a label past `num_labels`.

# %% tags=["setup"]
import random

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
    Trainer,
    TrainingArguments,
    set_seed,
)

set_seed(42)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print("device:", device)

# %% tags=["setup"]
words = "the a movie film was is great good bad awful boring fun plot actors loved hated it and but".split()
with open("vocab.txt", "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
tokenizer = BertTokenizerFast("vocab.txt")
random.seed(0)
texts = [" ".join(random.choices(words, k=random.randint(4, 12))) for _ in range(64)]
train_labels = [random.choice([0, 1, 2]) for _ in texts[:32]]
val_labels = [random.choice([0, 1, 2, 3]) for _ in texts[32:]]  # 3 = "mixed", only in the validation file
val_labels[0] = 3
label_names = sorted(set(train_labels))
num_labels = len(label_names)
print(num_labels, "labels")


# %% tags=["setup"]
class ReviewDataset(torch.utils.data.Dataset):
    def __init__(self, texts, labels):
        self.enc = tokenizer(texts, padding="max_length", truncation=True, max_length=16)
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: torch.tensor(v[i]) for k, v in self.enc.items()}
        item["labels"] = torch.tensor(self.labels[i])
        return item


train_ds = ReviewDataset(texts[:32], train_labels)
val_ds = ReviewDataset(texts[32:], val_labels)

# %% tags=["setup"]
config = BertConfig(
    vocab_size=tokenizer.vocab_size,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
    num_labels=num_labels,
)
model = BertForSequenceClassification(config).to(device)
args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=16,
    per_device_eval_batch_size=16,
    num_train_epochs=1,
    learning_rate=1e-3,
    logging_steps=1,
    save_strategy="no",
    report_to=[],
    disable_tqdm=True,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds)

# %% tags=["train"]
result = trainer.train()
history = [log["loss"] for log in trainer.state.log_history if "loss" in log]
print("train loss", result.training_loss)
with open("train_log.txt", "a") as log:
    log.write(f"trained {trainer.state.global_step} steps\n")

# %% tags=["bug"]
metrics = trainer.evaluate()
print(metrics)

# %% tags=["fix"]
known = [i for i, label in enumerate(val_labels) if label < num_labels]
val_ds = ReviewDataset([texts[32 + i] for i in known], [val_labels[i] for i in known])
metrics = trainer.evaluate(val_ds)
print(metrics)

# %% tags=["after"]
model.eval()
batch = tokenizer(["the movie was great", "boring plot and bad actors"], return_tensors="pt", padding=True)
with torch.no_grad():
    logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
print(logits.argmax(-1).tolist(), round(history[-1], 3), metrics["eval_loss"] > 0)
