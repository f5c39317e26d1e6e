"""Quickstart: image-like data that costs real CPU work per item, and a small CNN.

Each item is a compressed 3x64x64 image, decoded with zlib and augmented with
numpy (random crop, flip, a blur, normalisation) on every access, as a JPEG
pipeline would be. With the default DataLoader (num_workers=0) the model waits
for decoding; autotune measures how many workers, how much prefetch and how
many training threads this machine wants.

    autotune search examples/quickstart.py
"""

import zlib

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

SIZE = 64
CROP = 56
BLUR = 5
ITEMS = 1024
batch_size = 32


class EncodedImages(Dataset):
    """Synthetic images stored compressed, decoded and augmented on access."""

    def __init__(self, items: int = ITEMS, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 10, size=items)
        # Smooth structure plus noise: compresses roughly like a natural image.
        yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
        channel = np.arange(3, dtype=np.float32)[None, :, None, None]
        period = (3.0 + self.labels.astype(np.float32))[:, None, None, None]
        phase = rng.uniform(0, 2 * np.pi, size=(items, 3, 1, 1)).astype(np.float32)
        images = 127 + 100 * np.sin(xx / period + phase) * np.cos(yy / (4 + channel))
        images += rng.normal(0, 12, size=images.shape).astype(np.float32)
        pixels = np.clip(images, 0, 255).astype(np.uint8)
        self.blobs = [zlib.compress(image.tobytes(), 6) for image in pixels]

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raw = np.frombuffer(zlib.decompress(self.blobs[index]), dtype=np.uint8)
        image = raw.reshape(3, SIZE, SIZE).astype(np.float32)
        rng = np.random.default_rng(index)
        top, left = rng.integers(0, SIZE - CROP + 1, size=2)
        image = image[:, top : top + CROP, left : left + CROP]
        if rng.random() < 0.5:
            image = image[:, :, ::-1]
        # A box blur, as a stand-in for the colour and geometry augmentations of a real
        # pipeline: the point is that every item costs CPU time.
        pad = BLUR // 2
        padded = np.pad(image, ((0, 0), (pad, pad), (pad, pad)), mode="edge")
        image = sum(
            padded[:, dy : dy + CROP, dx : dx + CROP] for dy in range(BLUR) for dx in range(BLUR)
        ) / float(BLUR * BLUR)
        image = (image - 127.5) / 64.0
        return torch.from_numpy(np.ascontiguousarray(image)), int(self.labels[index])


def dataset() -> Dataset:
    return EncodedImages()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * (CROP // 4) ** 2, 10),
    )
