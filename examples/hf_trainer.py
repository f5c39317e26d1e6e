"""Hugging Face Trainer: tune the trainer's own input pipeline, then train on it.

A one-layer BERT classifier, built from its config (nothing is downloaded), on
synthetic sentences tokenised on every access, as a dataset that tokenises in
``__getitem__`` does. autotune searches the trainer as it is (its model, dataset,
collator, optimizer and compute_loss), and a TunedTrainer trains with the result.

    pip install 'autotune[hf]'
    python examples/hf_trainer.py
"""

import tempfile
import zlib
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

import autotune
from autotune.integrations import hf

VOCAB = 512
WORDS = ["data", "loader", "worker", "batch", "model", "token", "step", "cache", "disk", "fast"]


class Sentences(Dataset[dict[str, Any]]):
    """Synthetic sentences of 8 to 40 words, tokenised (a stable hash per word) on access."""

    def __init__(self, items: int = 512) -> None:
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> dict[str, Any]:
        length = 8 + (index * 13) % 33
        text = " ".join(WORDS[(index * 7 + k * k) % len(WORDS)] for k in range(length))
        ids = [1 + zlib.crc32(word.encode()) % (VOCAB - 1) for word in text.split()]
        return {"input_ids": ids, "labels": int("cache" in text[:40])}


def pad(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Pads to the longest sentence of the batch (DataCollatorWithPadding needs a tokenizer)."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, : len(item["input_ids"])] = torch.tensor(item["input_ids"])
    labels = torch.tensor([item["labels"] for item in items])
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}


def model() -> BertForSequenceClassification:
    """A one-layer BERT classifier, built from its config."""
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    return BertForSequenceClassification(config)


def arguments(output_dir: str, **tuned: Any) -> TrainingArguments:
    """Ten steps on CPU that write nothing; the tuned keywords on top."""
    options: dict[str, Any] = {"per_device_train_batch_size": 16, **tuned}
    return TrainingArguments(
        output_dir=output_dir,
        max_steps=10,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **options,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = Trainer(
            model=model(),
            args=arguments(output_dir),
            train_dataset=Sentences(),
            data_collator=pad,
        )
        # A small budget, so that the example takes seconds; drop it for a real search.
        result = hf.search_config_from_trainer(
            trainer,
            study="studies/hf_trainer.db",
            trials=3,
            finalists=1,
            rounds=1,
            window_seconds=0.2,
            max_windows=3,
            warmup_seconds=0.1,
            bounds=False,
            ceilings=False,
            seed=0,
            progress=autotune.LineProgress(),
        )
        print(f"tuned: {result.settings.describe()} ({result.rate_text()})")
        tuned = hf.training_arguments(result)
        print(f"TrainingArguments keywords: {tuned}")
        if result.settings.threads is not None:
            torch.set_num_threads(result.settings.threads)  # TrainingArguments has no knob
        trainer = hf.TunedTrainer(
            model=model(),
            args=arguments(output_dir, **tuned),
            train_dataset=Sentences(),
            data_collator=pad,
            result=result,
        )
        metrics = trainer.train().metrics
        print(
            f"trained {trainer.state.global_step} steps on the tuned loader: "
            f"{metrics['train_samples_per_second']:.0f} samples/s, loss {metrics['train_loss']:.3f}"
        )


if __name__ == "__main__":
    main()
