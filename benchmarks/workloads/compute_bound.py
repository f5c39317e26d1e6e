"""compute-bound: cheap data and a model heavy enough that loader settings hardly matter.

Items are rows of a tensor made once in memory (indexing costs microseconds);
the model is a wide MLP whose forward and backward take most of every step.
Workers only take CPU from the training threads here; a good tuner sees that
the loader is not the bottleneck and settles on a cheap config quickly.

    autotune search benchmarks/workloads/compute_bound.py
"""

import torch
from torch import nn
from torch.utils.data import Dataset

ITEMS = 4096
FEATURES = 3 * 32 * 32
HIDDEN = 1024
CLASSES = 10
batch_size = 64


class InMemoryRows(Dataset):
    """Rows of a tensor held in memory: loading is nearly free."""

    def __init__(self, items: int = ITEMS) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(items, FEATURES, generator=generator)
        self.targets = torch.randint(0, CLASSES, (items,), generator=generator)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def dataset() -> Dataset:
    return InMemoryRows()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )
