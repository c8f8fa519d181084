"""Small real models for the guard's correctness tests and benchmarks: a causal transformer LM and a CNN."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class TinyLM(nn.Module):
    """Token + position embeddings, a causal TransformerEncoder, a vocabulary head: a small GPT-style model."""

    def __init__(self, vocab: int = 1000, d_model: int = 256, layers: int = 2, heads: int = 4, context: int = 128):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        steps = ids.shape[1]
        positions = torch.arange(steps, device=ids.device)
        hidden = self.tokens(ids) + self.positions(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(steps, device=ids.device)
        return self.head(self.norm(self.blocks(hidden, mask=mask, is_causal=True)))

    def loss(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)


class SmallCNN(nn.Module):
    """Two conv blocks with batch norm and a linear classifier, for 32x32 RGB images."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(64 * 8 * 8, classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))

    def loss(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(images).float(), labels)


def lm_batch(batch: int, steps: int, vocab: int, seed: int = 0, device: str = "cpu"):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, steps), generator=generator)
    labels = torch.roll(ids, -1, dims=1)
    labels[:, -1] = -100  # nothing to predict after the last token
    return ids.to(device), labels.to(device)


def cnn_batch(batch: int, classes: int = 10, seed: int = 0, device: str = "cpu"):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, classes, (batch,), generator=generator)
    return images.to(device), labels.to(device)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs, labels) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = model.loss(inputs, labels)
    loss.backward()
    optimizer.step()
    return loss.detach()
