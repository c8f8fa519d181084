"""Tiny models, configs and a tokenizer shaped like Hugging Face's, so that scenarios need no transformers.

They have the attributes the diagnosis recognises by duck typing (``config.vocab_size``, ``num_labels``,
``max_position_embeddings``, ``type_vocab_size``, ``len(tokenizer)``, ``convert_tokens_to_ids``,
``resize_token_embeddings``) and the same failure modes as the real ones: an id beyond the word table, a sequence
beyond the position table, a token type beyond ``type_vocab_size``, a label beyond ``num_labels``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class TinyConfig:
    def __init__(
        self,
        vocab_size: int = 64,
        hidden_size: int = 16,
        num_labels: int = 2,
        max_position_embeddings: int = 32,
        type_vocab_size: int = 2,
        pad_token_id: int = 0,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_labels = num_labels
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.pad_token_id = pad_token_id


class TinyTokenizer:
    """Word-level: each known word is one id; ``add_tokens`` appends ids after the base vocabulary."""

    special = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")

    def __init__(self, words: list[str]) -> None:
        self.vocab = {token: index for index, token in enumerate([*self.special, *words])}
        self.added_tokens_encoder: dict[str, int] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab) + len(self.added_tokens_encoder)

    def add_tokens(self, tokens: list[str]) -> int:
        added = 0
        for token in tokens:
            if token not in self.vocab and token not in self.added_tokens_encoder:
                self.added_tokens_encoder[token] = len(self)
                added += 1
        return added

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        unknown = self.vocab["[UNK]"]
        return [self.added_tokens_encoder.get(t, self.vocab.get(t, unknown)) for t in tokens]

    def __call__(self, texts: list[str], max_length: int | None = None, truncation: bool = False) -> dict:
        rows = [self.convert_tokens_to_ids(["[CLS]", *text.split(), "[SEP]"]) for text in texts]
        if truncation and max_length:
            rows = [row[:max_length] for row in rows]
        width = max(len(row) for row in rows)
        ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
        return {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids)}


class TinyEmbeddings(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        words = self.word_embeddings(input_ids)
        positions = self.position_embeddings(position_ids)
        types = self.token_type_embeddings(token_type_ids)
        return words + positions + types


class TinyBertModel(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = TinyEmbeddings(config)
        self.encoder = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, token_type_ids=None):
        return torch.tanh(self.encoder(self.embeddings(input_ids, token_type_ids)))


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = TinyBertModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.bert.embeddings.word_embeddings

    def resize_token_embeddings(self, new_size: int) -> nn.Embedding:
        old = self.get_input_embeddings()
        new = nn.Embedding(new_size, old.embedding_dim)
        with torch.no_grad():
            new.weight[: old.num_embeddings] = old.weight
        self.bert.embeddings.word_embeddings = new
        self.config.vocab_size = new_size
        return new

    def forward(self, input_ids, token_type_ids=None, labels=None) -> dict:
        logits = self.classifier(self.bert(input_ids, token_type_ids)[:, 0])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1))
        return {"loss": loss, "logits": logits}


class LearnedPositionalEmbedding(nn.Embedding):
    """BART's: ids are offset by 2, so the table has max_position_embeddings + 2 rows."""

    def __init__(self, num_positions: int, dim: int) -> None:
        self.offset = 2
        super().__init__(num_positions + self.offset, dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0) + self.offset
        return super().forward(positions)


class TinySeq2Seq(nn.Module):
    """An encoder-decoder (BART-like): labels become the decoder's inputs, so long labels overflow positions too."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder_embed_positions = LearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        self.decoder_embed_positions = LearnedPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, labels):
        encoded = self.shared(input_ids) + self.encoder_embed_positions(input_ids)
        decoder_input_ids = torch.cat([torch.zeros_like(labels[:, :1]), labels[:, :-1]], dim=1)
        decoded = self.shared(decoder_input_ids) + self.decoder_embed_positions(decoder_input_ids)
        logits = self.lm_head(decoded + encoded.mean(1, keepdim=True))
        return F.cross_entropy(logits.reshape(-1, self.config.vocab_size), labels.reshape(-1))
