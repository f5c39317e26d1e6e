"""sim-ddp: two DDP ranks, each with its own simulated accelerator, loading on shared CPUs.

Each item is a small image made and augmented with numpy (noise, a blur, a crop and a
flip: about half a millisecond of CPU), trained by two DistributedDataParallel ranks
(gloo, as on a CPU machine; ``search = {"ranks": 2}``), each rank a process with its
own simulated device (``benchmarks.simdevice``), as each GPU of a node has its own.
The ranks' loaders share the machine's CPUs, so the workers are budgeted per rank.

Device ceiling, per rank: 32 samples / (1 ms + 32 x 0.2 ms) = 32 / 7.4 ms, about 4,324
samples/s; both ranks together about 8,649.

    autotune search benchmarks/workloads/sim_ddp.py
"""

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.simdevice import DeviceSpec, SimulatedModel

ITEMS = 4096
SIZE = 40
CROP = 32
CLASSES = 10
batch_size = 32
device = "cpu"
search = {"ranks": 2}
DEVICE = DeviceSpec(launch_s=0.001, sample_s=0.0002)


class AugmentedImages(Dataset):
    """Images made from their index, blurred, cropped at random and flipped, per access."""

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(index)
        image = rng.normal(0.0, 1.0, size=(3, SIZE, SIZE)).astype(np.float32)
        for axis in (1, 2):  # a 5-tap blur along each axis
            image = sum(np.roll(image, shift, axis=axis) for shift in (-2, -1, 0, 1, 2)) / 5
        top, left = np.random.default_rng().integers(0, SIZE - CROP + 1, size=2)
        image = image[:, top : top + CROP, left : left + CROP]
        if np.random.default_rng().random() < 0.5:
            image = image[:, :, ::-1]
        image = (image - image.mean()) / (image.std() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(image)), index % CLASSES


def dataset() -> Dataset:
    return AugmentedImages()


def model() -> nn.Module:
    net = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, CLASSES))
    return SimulatedModel(net, DEVICE)
