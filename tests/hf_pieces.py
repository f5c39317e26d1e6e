"""A tiny Hugging Face workload for tests: module level, so probes can unpickle it."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer

VOCAB = 100


class Sentences(Dataset):
    """Token ids of varying length (3 to 12) with a binary label, as a tokenizer makes them."""

    def __init__(self, length: int = 64) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        size = 3 + index % 10
        ids = [1 + (index * 7 + k * 3) % (VOCAB - 1) for k in range(size)]
        return {"input_ids": ids, "labels": index % 2}


def pad(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pads the token ids to the longest in the batch (what DataCollatorWithPadding does,
    without a tokenizer to download)."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, : len(item["input_ids"])] = torch.tensor(item["input_ids"])
        mask[row, : len(item["input_ids"])] = 1
    labels = torch.tensor([item["labels"] for item in items])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def tiny_bert() -> BertForSequenceClassification:
    """A one-layer BERT classifier of a few thousand parameters, built from its config."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    return BertForSequenceClassification(config)


class ScaledLossTrainer(Trainer):
    """A Trainer whose compute_loss override reads an attribute of its own."""

    def __init__(self, *args: Any, loss_scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss_scale = loss_scale

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        return loss * self.loss_scale
