"""cpu-decode: real JPEG files decoded and augmented on every access, and a small CNN.

``ITEMS`` JPEG files (``SIZE`` x ``SIZE`` pixels, quality 90) are written once
into a temporary directory (``setup()``; ``cleanup()`` removes them). Each
access reads one file, decodes it with Pillow, takes a random crop, resizes it
to ``CROP`` x ``CROP``, flips it half the time and normalises it with numpy:
the usual image pipeline, and real CPU work. On a 2-core machine the
DataLoader workers and the training loop compete for the same cores: too few
workers starve the model, too many (or too many training threads) starve
each other.

    autotune search benchmarks/workloads/cpu_decode.py
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from _data import data_root

ITEMS = 1024
SIZE = 320
CROP = 64
QUALITY = 90
CLASSES = 10
batch_size = 32
_NAME = f"jpeg-{ITEMS}x{SIZE}-q{QUALITY}"


def _image(index: int, grain: np.ndarray) -> Image.Image:
    """A synthetic photo-like image: smooth colour fields with shapes, and sensor noise."""
    rng = np.random.default_rng(index)
    small = SIZE // 8
    yy, xx = np.mgrid[0:small, 0:small].astype(np.float32) / small
    fields = [
        120 + 70 * np.sin(2 * np.pi * (rng.uniform(1, 4) * xx + rng.uniform(1, 4) * yy) + phase)
        for phase in rng.uniform(0, 2 * np.pi, size=3)
    ]
    coarse = np.stack(fields, axis=-1)
    for _ in range(4):
        cy, cx = rng.uniform(0, 1, size=2)
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < rng.uniform(0.05, 0.25) ** 2
        coarse[inside] = rng.uniform(0, 255, size=3)
    smooth = Image.fromarray(coarse.clip(0, 255).astype(np.uint8)).resize(
        (SIZE, SIZE), Image.BICUBIC
    )
    top, left = rng.integers(0, SIZE, size=2)
    noise = grain[top : top + SIZE, left : left + SIZE]
    return Image.fromarray(
        (np.asarray(smooth, dtype=np.int16) + noise).clip(0, 255).astype(np.uint8)
    )


def setup() -> Path:
    """Write the JPEG files once (atomically, so concurrent probes agree); returns
    their folder."""
    folder = data_root() / _NAME
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{_NAME}-", dir=folder.parent))
    # Sensor noise: one texture, a different window of it per image (cheaper than fresh noise).
    grain = np.random.default_rng(ITEMS).normal(0, 6, size=(2 * SIZE, 2 * SIZE, 3)).astype(np.int16)
    for index in range(ITEMS):
        _image(index, grain).save(scratch / f"{index:05d}.jpg", quality=QUALITY)
    try:
        scratch.rename(folder)
    except OSError:  # another process finished first: use its files
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def cleanup() -> None:
    """Remove the JPEG files."""
    shutil.rmtree(data_root() / _NAME, ignore_errors=True)


class JpegFolder(Dataset):
    """JPEG files decoded, cropped, resized, flipped and normalised on every access."""

    def __init__(self, folder: Path) -> None:
        self.paths = sorted(folder.glob("*.jpg"))
        self.labels = [index % CLASSES for index in range(len(self.paths))]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng()
        with Image.open(self.paths[index]) as file:
            image = file.convert("RGB")
        side = int(rng.integers(SIZE // 2, SIZE + 1))
        top, left = rng.integers(0, SIZE - side + 1, size=2)
        image = image.resize((CROP, CROP), Image.BILINEAR, box=(left, top, left + side, top + side))
        pixels = np.asarray(image, dtype=np.float32)
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        pixels = (pixels - 127.5) / 64.0
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), self.labels[index]


def dataset() -> Dataset:
    return JpegFolder(setup())


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, CLASSES),
    )
