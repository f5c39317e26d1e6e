"""A GPU vision config: JPEG images decoded and augmented on the CPU, shipped as uint8,
normalised on the device, and a small ResNet.

This is the shape of training that leaves a GPU waiting for data: every item is a
JPEG decoded with Pillow, randomly cropped, resized and flipped in the loader's
processes, while the device trains in milliseconds. The batch crosses to the device
as uint8 (a quarter of the bytes of float32) and the model's first layer turns it
into normalised floats there. autotune measures how many workers, how much prefetch,
whether pinned memory and which AMP keep the device busy on this machine; on a
machine without a GPU the same config runs on the CPU.

    pip install pillow          # the decoder (autotune's `bench` extra has it)
    autotune search examples/gpu_vision.py
"""

import io

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

STORED = 40
"""Side of the stored JPEGs, in pixels."""
SIZE = 32
"""Side of the images the model trains on, after the random crop and resize."""
ITEMS = 1024
CLASSES = 10
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
batch_size = 64


class JpegImages(Dataset):
    """Synthetic photographs stored as JPEG bytes, decoded and augmented on access."""

    def __init__(self, items: int = ITEMS, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, CLASSES, size=items)
        yy, xx = np.mgrid[0:STORED, 0:STORED].astype(np.float32)
        self.jpegs = []
        for label in self.labels:
            # Smooth bands whose frequency is the label, and noise: compresses like a photo.
            phase = rng.uniform(0, 2 * np.pi, size=3).astype(np.float32)
            bands = np.sin(xx[..., None] / (2.0 + label) + phase) * np.cos(yy[..., None] / 5.0)
            pixels = 127 + 100 * bands + rng.normal(0, 10, size=(STORED, STORED, 3))
            image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=90)
            self.jpegs.append(buffer.getvalue())

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.open(io.BytesIO(self.jpegs[index])).convert("RGB")
        rng = np.random.default_rng()
        # A random resized crop and a flip, as torchvision's RandomResizedCrop would.
        side = int(rng.integers(STORED // 2, STORED + 1))
        left, top = rng.integers(0, STORED - side + 1, size=2)
        image = image.crop((int(left), int(top), int(left) + side, int(top) + side))
        image = image.resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        # uint8, channels first: normalised on the device, not here.
        pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1)
        return pixels.contiguous(), int(self.labels[index])


class Normalize(nn.Module):
    """uint8 images to normalised float on whatever device the model is on."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1) * 255)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images.float() - self.mean) / self.std


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions and a shortcut."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def dataset() -> Dataset:
    return JpegImages()


def model() -> nn.Module:
    return nn.Sequential(
        Normalize(),
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        Block(16, 32, 2),
        Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, CLASSES),
    )
