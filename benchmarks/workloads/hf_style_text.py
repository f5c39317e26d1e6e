"""hf-style-text: a Hugging Face-style text classifier, built here with no download.

Items are dicts of token ids of varied length (16 to 256 tokens, seeded) and a
label; ``collate_fn`` pads each batch to its longest item and adds the attention
mask, as a tokenizer's padding collator does. The model is a small transformer
encoder written in plain torch whose ``forward(input_ids, attention_mask, labels)``
returns an object with ``.loss``, the way a ``transformers`` model does, so the
config defines neither ``step`` nor ``loss``: autotune trains it through its
default ``model(**batch)`` and ``output.loss``.

    autotune search benchmarks/workloads/hf_style_text.py
"""

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

ITEMS = 2048
VOCAB = 1000
WIDTH = 64
HEADS = 4
LAYERS = 2
SHORTEST, LONGEST = 16, 256
CLASSES = 4
PAD = 0
batch_size = 16


class TokenizedTexts(Dataset):
    """Token ids of varied length and a label per item, made once from a fixed seed."""

    def __init__(self, items: int = ITEMS) -> None:
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(SHORTEST, LONGEST + 1, (items,), generator=generator)
        # Ids from 1: 0 is the padding token.
        self.texts = [torch.randint(1, VOCAB, (int(n),), generator=generator) for n in lengths]
        self.labels = torch.randint(0, CLASSES, (items,), generator=generator)

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.texts[index], "labels": int(self.labels[index])}


def collate_fn(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pad to the batch's longest item; the mask is 1 on tokens, 0 on padding."""
    longest = max(len(item["input_ids"]) for item in items)
    input_ids = torch.full((len(items), longest), PAD, dtype=torch.long)
    attention_mask = torch.zeros((len(items), longest), dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        input_ids[row, :n] = item["input_ids"]
        attention_mask[row, :n] = 1
    labels = torch.tensor([item["labels"] for item in items], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class TinyEncoderClassifier(nn.Module):
    """Token and position embeddings, a transformer encoder, mean pooling over the
    tokens, a classification head; the loss computed in ``forward`` as in HF models."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH, padding_idx=PAD)
        self.positions = nn.Embedding(LONGEST, WIDTH)
        # No dropout: drawing its masks on the CPU took half of every step, a cost of
        # the random generator rather than of the model.
        layer = nn.TransformerEncoderLayer(
            WIDTH, HEADS, dim_feedforward=4 * WIDTH, dropout=0.0, batch_first=True
        )
        # No nested tensors: they serve inference only, and warn in training.
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> types.SimpleNamespace:
        places = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.tokens(input_ids) + self.positions(places)
        hidden = self.encoder(hidden, src_key_padding_mask=attention_mask == 0)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.head(pooled)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels)
        return types.SimpleNamespace(loss=loss, logits=logits)


def dataset() -> Dataset:
    return TokenizedTexts()


def model() -> nn.Module:
    return TinyEncoderClassifier()
