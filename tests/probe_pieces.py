"""Module-level pieces for the probe-defect tests (probes unpickle them by name)."""

from __future__ import annotations

import time

import torch
import workloads
from torch import nn


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
