"""dict-batches: items are dicts of tensors, and the model takes the image by name.

Each item is ``{"image": 3 x SIZE x SIZE float32, "label": int64}``, made on
the fly from a seeded generator with a little numpy work (a smooth colour
field, sensor noise, normalisation): what a dataset written for several
inputs, or in the Hugging Face style, returns. The default collate turns the
dicts into one dict batch, and ``step(model, batch)`` feeds ``batch["image"]``
to a small CNN and takes the cross-entropy against ``batch["label"]``.

What should matter is what matters for tuple batches: the items cost some CPU,
so workers pay up to the cores, and the training threads share those cores
with them. The dict itself should not: a tuner has to move, count and time a
dict batch like any other. One that only understands ``(inputs, targets)``
fails here outright rather than choosing badly.

    autotune search benchmarks/workloads/dict_batches.py
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

ITEMS = 2048
SIZE = 48
CLASSES = 10
batch_size = 32


class DictImages(Dataset[dict[str, torch.Tensor]]):
    """Images made on every access, returned as ``{"image": ..., "label": ...}``."""

    def __init__(self, items: int = ITEMS) -> None:
        self.items = items
        grid = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
        self.yy, self.xx = grid[0], grid[1]

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng(index)
        freq = rng.uniform(1, 4, size=(3, 1, 1)).astype(np.float32)
        phase = rng.uniform(0, 2 * np.pi, size=(3, 1, 1)).astype(np.float32)
        image = 0.5 + 0.4 * np.sin(2 * np.pi * freq * (self.xx + self.yy) + phase)
        image += rng.normal(0, 0.05, size=image.shape).astype(np.float32)
        image = (image - image.mean(axis=(1, 2), keepdims=True)) / (
            image.std(axis=(1, 2), keepdims=True) + 1e-6
        )
        return {
            "image": torch.from_numpy(image.astype(np.float32)),
            "label": torch.tensor(index % CLASSES),
        }


def dataset() -> Dataset[dict[str, torch.Tensor]]:
    return DictImages()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, CLASSES),
    )


def step(net: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model takes the image; the loss compares its logits with the label."""
    return F.cross_entropy(net(batch["image"]).float(), batch["label"])
