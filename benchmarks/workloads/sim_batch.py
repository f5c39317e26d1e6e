"""sim-batch: a simulated accelerator whose launch overhead makes larger batches faster.

Rows of an in-memory tensor feed a simulated device (``benchmarks.simdevice``) whose
every step pays 6 ms however small its batch (kernel launches, the optimizer's small
kernels) and only 0.02 ms per sample: at the batch size of 16 this user trains with,
the device spends most of its time launching. The user allows batches up to 256
(``space``); the batch size changes what is learned, so it is the user's to bound.

Device ceiling: batch / (6 ms + batch x 0.02 ms): 16 / 6.32 ms, about 2,532 samples/s;
64 / 7.28 ms, about 8,791; 256 / 11.12 ms, about 23,022.

    autotune search benchmarks/workloads/sim_batch.py
"""

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ROWS = 16384
FEATURES = 32
CLASSES = 10
batch_size = 16
device = "cpu"
space = {"batch_size": [16, 32, 64, 128, 256]}
DEVICE = DeviceSpec(launch_s=0.006, sample_s=0.00002)


def dataset() -> Dataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(ROWS, FEATURES, generator=generator)
    return TensorDataset(inputs, torch.arange(ROWS) % CLASSES)


def model() -> nn.Module:
    return SimulatedModel(nn.Linear(FEATURES, CLASSES), DEVICE)
