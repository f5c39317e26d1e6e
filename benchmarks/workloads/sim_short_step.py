"""sim-short-step: rows in memory and a simulated accelerator whose step is under 2 ms.

Rows of an in-memory tensor feed a simulated device (``benchmarks.simdevice``) whose
step at batch 64 takes 0.5 ms of launches and 0.02 ms per sample: 1.78 ms, as a small
model's step on a GPU. The training process's own share of a step is the rows' indexing
and collate, a tiny forward and backward, and the launch; any cost the measuring
instrument adds per step is a share of so short a step that it shows in the figure, so
the agreement check reads the probe against a plain loop here.

Device ceiling: 64 / (0.5 ms + 64 x 0.02 ms) = 64 / 1.78 ms, about 35,955 samples/s.

    autotune search benchmarks/workloads/sim_short_step.py
"""

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ROWS = 16384
FEATURES = 64
CLASSES = 10
batch_size = 64
device = "cpu"
DEVICE = DeviceSpec(launch_s=0.0005, sample_s=0.00002)


def dataset() -> Dataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(ROWS, FEATURES, generator=generator)
    return TensorDataset(inputs, torch.arange(ROWS) % CLASSES)


def model() -> nn.Module:
    return SimulatedModel(nn.Linear(FEATURES, CLASSES), DEVICE)
