# An image classifier on 32x32 crops: torchvision's resnet18 with 10 classes, trained on the train CSV's 0-based
# labels. The validation CSV comes from another source and numbers its classes 1..10.

# %% tags=["setup"]
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(0)
    torch.backends.cudnn.benchmark = True
print("device:", device)

# %% tags=["setup"]
images = np.random.rand(64, 3, 32, 32).astype(np.float32)
train_df = pd.DataFrame({"image_id": range(32), "label": np.arange(32) % 10})
val_df = pd.DataFrame({"image_id": range(32, 64), "class_id": np.random.randint(1, 11, 32)})
val_df.loc[0, "class_id"] = 10
NUM_CLASSES = train_df["label"].nunique()


class CropDataset(Dataset):
    def __init__(self, df, label_col):
        self.ids = df["image_id"].values
        self.labels = df[label_col].values

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return torch.from_numpy(images[self.ids[i]]), torch.tensor(self.labels[i])


train_loader = DataLoader(CropDataset(train_df, "label"), batch_size=16, shuffle=True)
val_loader = DataLoader(CropDataset(val_df, "class_id"), batch_size=16)

# %% tags=["setup"]
model = torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES)
model = model.to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
history = []

# %% tags=["train"]
for epoch in range(2):
    model.train()
    running = 0.0
    for xb, yb in train_loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        running += loss.item()
    scheduler.step()
    history.append(running / len(train_loader))
    print(f"epoch {epoch}: train loss {history[-1]:.4f}")
with open("train_log.txt", "a") as log:
    log.write(f"epoch {epoch} {history[-1]:.4f}\n")

# %% tags=["bug"]
model.eval()
val_loss = 0.0
with torch.no_grad():
    for xb, yb in val_loader:
        xb, yb = xb.to(device), yb.to(device)
        val_loss += criterion(model(xb), yb).item()
print("val loss", val_loss / len(val_loader))

# %% tags=["fix"]
val_loader = DataLoader(CropDataset(val_df.assign(class_id=val_df["class_id"] - 1), "class_id"), batch_size=16)
model.eval()
val_loss = 0.0
with torch.no_grad():
    for xb, yb in val_loader:
        xb, yb = xb.to(device), yb.to(device)
        val_loss += criterion(model(xb), yb).item()
print("val loss", val_loss / len(val_loader))

# %% tags=["after"]
correct = 0
with torch.no_grad():
    for xb, yb in val_loader:
        correct += (model(xb.to(device)).argmax(1).cpu() == yb).sum().item()
print(f"val accuracy {correct / len(val_df):.3f}, lr {scheduler.get_last_lr()[0]}, epochs {len(history)}")
