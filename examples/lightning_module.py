"""Lightning: tune the loader of a LightningModule's training, then fit with the result.

The search trains the module through its own ``training_step`` (a ``step`` of
autotune's), on items that cost CPU time to decode, as images do; the fit then
takes its precision and accumulation from the result, and its loader from
``tuned_loader`` in the data module's ``train_dataloader``.

    pip install 'autotune[lightning]'
    python examples/lightning_module.py
"""

import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

import autotune
from autotune.integrations import lightning

FEATURES = 256


class Encoded(Dataset[tuple[torch.Tensor, int]]):
    """Feature vectors stored compressed and decoded on every access."""

    def __init__(self, items: int = 1024) -> None:
        rng = np.random.default_rng(0)
        vectors = rng.normal(size=(items, FEATURES)).astype(np.float32)
        self.labels = (vectors[:, :8].sum(axis=1) > 0).astype(np.int64)
        self.blobs = [zlib.compress(vector.tobytes(), 9) for vector in vectors]

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        vector = np.frombuffer(zlib.decompress(self.blobs[index]), dtype=np.float32)
        return torch.from_numpy(vector.copy()), int(self.labels[index])


class Classifier(pl.LightningModule):
    """A two-layer classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2)
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        inputs, labels = batch
        return torch.nn.functional.cross_entropy(self.net(inputs), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return optimizer(self.parameters())


def optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3)


def step(model: Classifier, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """What the search trains: the module's own training_step."""
    return model.training_step(batch, 0)


class Data(pl.LightningDataModule):
    """The training data, loaded the tuned way."""

    def __init__(self, result: autotune.SearchResult) -> None:
        super().__init__()
        self.result = result

    def train_dataloader(self) -> Any:
        return lightning.tuned_loader(Encoded(), self.result)


def main() -> None:
    # A small budget, so that the example takes seconds; drop it for a real search.
    result = autotune.search(
        dataset=Encoded,
        model=Classifier,
        step=step,
        optimizer=optimizer,
        batch_size=32,
        device="cpu",
        study="studies/lightning_module.db",
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
    keywords = lightning.trainer_arguments(result)
    print(f"Trainer keywords: {keywords}")
    print(f"DataLoader keywords: {lightning.dataloader_arguments(result)}")
    if result.settings.threads is not None:
        torch.set_num_threads(result.settings.threads)  # no Trainer keyword for it
    trainer = pl.Trainer(
        max_steps=20,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **keywords,
    )
    trainer.fit(Classifier(), datamodule=Data(result))
    print(f"trained {trainer.global_step} steps on the tuned loader")


if __name__ == "__main__":
    main()
