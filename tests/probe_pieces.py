"""Module-level pieces for the probe-defect tests (probes unpickle them by name)."""

from __future__ import annotations

import time

import torch
import workloads
from torch import nn
from torch.utils.data import default_collate


class SlowStepModel(nn.Module):
    """A linear model whose forward sleeps ``seconds``: a slow training step that leaves
    the CPU free."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.linear = nn.Linear(workloads.FEATURES, workloads.CLASSES)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.linear(inputs)


def slow_step_model() -> nn.Module:
    """Training steps of 0.4 s."""
    return SlowStepModel(0.4)


def slow_cuda_step_model() -> nn.Module:
    """Training steps of 1.5 s: longer than a CUDA probe's start-up leaves to spare."""
    return SlowStepModel(1.5)


def slow_collate(items: list) -> object:
    """The default collate after 50 ms asleep: a loader that keeps a GPU waiting."""
    time.sleep(0.05)
    return default_collate(items)


def big_wide_model() -> nn.Module:
    """Eight square layers of 4096: a step a large GPU is busy with for milliseconds."""
    return workloads.wide_model(width=4096, depth=8)


class WideDataset(workloads.InstantDataset):
    """Items of 4096 features made in advance (for :func:`big_wide_model`)."""

    def __init__(self, length: int = 4096) -> None:
        generator = torch.Generator().manual_seed(0)
        self.inputs = torch.randn(length, 4096, generator=generator)
        self.targets = torch.arange(length) % workloads.CLASSES
