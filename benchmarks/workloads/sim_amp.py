"""sim-amp: a simulated accelerator whose tensor cores make bf16 three times faster.

Rows of an in-memory tensor feed a simulated device (``benchmarks.simdevice``) whose
per-sample time under ``torch.autocast`` (bf16 or fp16) is 0.3 of its float32 time, as
tensor cores shorten a matmul-heavy step. Loading is cheap beside either rate, so AMP
is what decides; it changes the arithmetic, so a user opts in by leaving it in the space.

Device ceiling: 64 samples / (0.5 ms + 64 x 0.4 ms) = 64 / 26.1 ms, about 2,452
samples/s; under AMP 64 / (0.5 ms + 64 x 0.12 ms) = 64 / 8.18 ms, about 7,824.

    autotune search benchmarks/workloads/sim_amp.py
"""

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ROWS = 8192
FEATURES = 128
CLASSES = 10
batch_size = 64
device = "cpu"
DEVICE = DeviceSpec(launch_s=0.0005, sample_s=0.0004, amp_factor=0.3)


def dataset() -> Dataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(ROWS, FEATURES, generator=generator)
    return TensorDataset(inputs, torch.arange(ROWS) % CLASSES)


def model() -> nn.Module:
    return SimulatedModel(nn.Linear(FEATURES, CLASSES), DEVICE)
