"""small-in-ram: a tiny dataset held in memory, a few batches per epoch.

``ITEMS`` images (3 x ``SIZE`` x ``SIZE`` uint8, made once when the dataset is
built) are ``ITEMS // batch_size`` batches: an epoch lasts a few steps, as on
a small fine-tuning set, a validation split or a debugging subset. Each access
takes a random crop, flips it half the time and scales it to float, a fraction
of a millisecond of numpy.

What should matter: the start of every epoch. Workers that are not persistent
are started again for each epoch (a process each, and a wait for their first
batches) to make four batches; persistent ones are kept, but still refill
their prefetch queue at each epoch's start. With so little work per item,
``num_workers=0`` or a few persistent workers should win, and many
non-persistent workers lose badly.

    autotune search benchmarks/workloads/small_in_ram.py
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

batch_size = 32
ITEMS = 4 * batch_size
SIZE = 40
CROP = 32
CLASSES = 10


class SmallImages(Dataset[tuple[torch.Tensor, int]]):
    """A few batches of images in memory, randomly cropped and flipped on access."""

    def __init__(self, items: int = ITEMS) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(items, SIZE, SIZE, 3), dtype=np.uint8)
        self.labels = rng.integers(0, CLASSES, size=items)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng()
        top, left = rng.integers(0, SIZE - CROP + 1, size=2)
        pixels = self.images[index, top : top + CROP, left : left + CROP]
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        scaled = pixels.astype(np.float32).transpose(2, 0, 1) / 127.5 - 1.0
        return torch.from_numpy(np.ascontiguousarray(scaled)), int(self.labels[index])


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return SmallImages()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, CLASSES),
    )
