"""sim-storage: items that wait on slow storage, for a simulated accelerator.

Each item waits 4 ms for its bytes (remote or network storage: the wait holds no CPU)
and then costs almost nothing to prepare; the model trains on a simulated device
(``benchmarks.simdevice``) in a loop that waits for every step, as a loop that reads
the loss each step does. One worker brings 250 samples/s, so keeping the device busy
takes a dozen workers: more workers than this 2-core machine has cores.

Device ceiling: 32 samples / (1.5 ms + 32 x 0.3 ms) = 32 / 11.1 ms, about 2,883
samples/s.

    autotune search benchmarks/workloads/sim_storage.py
"""

import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ITEMS = 4096
FEATURES = 64
CLASSES = 10
LATENCY_S = 0.004
batch_size = 32
device = "cpu"
DEVICE = DeviceSpec(launch_s=0.0015, sample_s=0.0003, mode="sync")


class RemoteRows(Dataset):
    """Rows that each wait ``LATENCY_S`` for storage, then arrive as a small tensor."""

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(LATENCY_S)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(FEATURES, generator=generator), index % CLASSES


def dataset() -> Dataset:
    return RemoteRows()


def model() -> nn.Module:
    return SimulatedModel(nn.Linear(FEATURES, CLASSES), DEVICE)
