"""short-step: rows in memory and a small MLP, a training step of a few milliseconds.

Items are rows of a tensor made once in memory (indexing costs microseconds); the
model is a three-layer MLP whose forward, backward and optimizer step at batch 64
on two threads take about 2 ms, with the default loader's collate beside it: a
step as short as a small model's on a GPU. Any cost the measuring instrument adds
per step (a clock read, a message, a synchronisation, an allocation) is a share of
so short a step that it shows in the figure, so the agreement check reads the
probe against a plain loop here; ``short_step_long.py`` is the same data with a
step about ten times longer, for reference.

What should matter: little. Loading and the step are both cheap; workers only
take CPU from the training threads.

    autotune search benchmarks/workloads/short_step.py
"""

import torch
from torch import nn
from torch.utils.data import Dataset

ITEMS = 8192
FEATURES = 256
HIDDEN = 256
CLASSES = 10
batch_size = 64


class InMemoryRows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows of a tensor held in memory: loading is nearly free."""

    def __init__(self, items: int = ITEMS) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(items, FEATURES, generator=generator)
        self.targets = torch.randint(0, CLASSES, (items,), generator=generator)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def dataset() -> Dataset[tuple[torch.Tensor, torch.Tensor]]:
    return InMemoryRows()


def mlp(hidden: int) -> nn.Module:
    """The MLP of this workload and its sibling, ``hidden`` units wide."""
    return nn.Sequential(
        nn.Linear(FEATURES, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, CLASSES),
    )


def model() -> nn.Module:
    return mlp(HIDDEN)
