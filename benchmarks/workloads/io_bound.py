"""io-bound: every item waits on storage latency, and a small CNN trains on it.

Each item is fetched from "remote storage": a sleep of ``LATENCY_S`` that
releases the CPU, as a GET to an object store does, then a small image made
from a seeded generator. With ``num_workers=0`` the training loop waits for
every item in turn; workers overlap the waits, and because a waiting worker
uses no CPU, more workers than cores pay, until the model itself is the
bottleneck. An epoch is short (``ITEMS`` items), so workers that are not
persistent are started again every few seconds.

    autotune search benchmarks/workloads/io_bound.py
"""

import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

LATENCY_S = 0.010
ITEMS = 2048
SIZE = 32
CLASSES = 10
batch_size = 32
# A user who knows their data waits on the network allows more workers than cores.
space = {"num_workers": {"low": 0, "high": 16}}


class RemoteImages(Dataset):
    """Items that each cost ``latency`` seconds of waiting and almost no CPU."""

    def __init__(self, items: int = ITEMS, latency: float = LATENCY_S) -> None:
        self.items = items
        self.latency = latency

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency)
        rng = np.random.default_rng(index)
        image = rng.standard_normal((3, SIZE, SIZE), dtype=np.float32)
        return torch.from_numpy(image), index % CLASSES


def dataset() -> Dataset:
    return RemoteImages()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 4, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, CLASSES),
    )
