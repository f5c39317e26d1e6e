"""sim-device-bound: rows already in memory, and a simulated accelerator that takes its time.

Rows of an in-memory tensor (microseconds each to fetch and collate) feed a simulated
device (``benchmarks.simdevice``) whose steps are long, queued as CUDA queues them: the
main process loads the next batch while the device works, so the default loader
(no workers) is already near the best, and a tuned loader must not be slower.

Device ceiling: 64 samples / (1 ms + 64 x 0.5 ms) = 64 / 33 ms, about 1,939 samples/s.

    autotune search benchmarks/workloads/sim_device_bound.py
"""

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ROWS = 8192
FEATURES = 256
CLASSES = 10
batch_size = 64
device = "cpu"
DEVICE = DeviceSpec(launch_s=0.001, sample_s=0.0005)


def dataset() -> Dataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(ROWS, FEATURES, generator=generator)
    return TensorDataset(inputs, torch.arange(ROWS) % CLASSES)


def model() -> nn.Module:
    return SimulatedModel(nn.Linear(FEATURES, CLASSES), DEVICE)
