# family: bce_target_range
# variable: masks
# Binary segmentation: the masks were loaded as PNGs in 0..255 and never divided by 255.
import numpy as np
import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
masks_np = (np.random.rand(4, 1, 16, 16) > 0.5).astype(np.uint8) * 255
images = torch.rand(4, 3, 16, 16)
masks = torch.from_numpy(masks_np).float()
unet = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1), nn.Sigmoid()).to(device)
criterion = nn.BCELoss()
# %%
pred = unet(images.to(device))
loss = criterion(pred, masks.to(device))
loss.backward()
