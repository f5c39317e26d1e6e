"""tiny-model: costly features per item, and a model that is a single Linear layer.

Each item is a one-second clip of synthetic audio (``RATE`` samples: a few
tones, a chirp and noise, from a seeded generator) turned into log spectral
features on access with numpy: framing, a Hann window, an FFT per frame, the
power summed into ``BANDS`` bands and its log taken. That is a few
milliseconds of CPU per item; the model, one ``nn.Linear`` over the flattened
features (a linear probe), trains on a whole batch in less time than one
item takes to make.

What should matter: loading, nearly alone. Workers pay up to the cores and no
further (the work is CPU, not waiting); the training process needs little CPU,
so one training thread should do, leaving the cores to the workers. The batch
size and AMP change almost nothing.

    autotune search benchmarks/workloads/tiny_model.py
"""

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

ITEMS = 2048
RATE = 16000
FRAME = 400
HOP = 160
BANDS = 40
CLASSES = 10
FRAMES = 1 + (RATE - FRAME) // HOP
batch_size = 64


class SpectralFeatures(Dataset[tuple[torch.Tensor, int]]):
    """Audio clips made and turned into log band energies on every access."""

    def __init__(self, items: int = ITEMS) -> None:
        self.items = items
        self.window = np.hanning(FRAME).astype(np.float32)
        edges = np.linspace(0, FRAME // 2 + 1, BANDS + 1).astype(int)
        self.bands = np.zeros((FRAME // 2 + 1, BANDS), dtype=np.float32)
        for band in range(BANDS):
            self.bands[edges[band] : edges[band + 1], band] = 1.0
        self.time = np.arange(RATE, dtype=np.float32) / RATE

    def __len__(self) -> int:
        return self.items

    def _clip(self, index: int) -> np.ndarray:
        rng = np.random.default_rng(index)
        clip = rng.normal(0, 0.1, size=RATE).astype(np.float32)
        for frequency in rng.uniform(100, 4000, size=3):
            clip += np.sin(2 * np.pi * frequency * self.time)
        sweep = rng.uniform(200, 2000)
        clip += np.sin(2 * np.pi * sweep * self.time * (1 + self.time))
        return clip

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        clip = self._clip(index)
        starts = np.arange(FRAMES) * HOP
        frames = clip[starts[:, None] + np.arange(FRAME)] * self.window
        power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
        features = np.log(power.astype(np.float32) @ self.bands + 1e-6)
        features = (features - features.mean()) / (features.std() + 1e-6)
        return torch.from_numpy(features.astype(np.float32).reshape(-1)), index % CLASSES


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return SpectralFeatures()


def model() -> nn.Module:
    return nn.Linear(FRAMES * BANDS, CLASSES)
