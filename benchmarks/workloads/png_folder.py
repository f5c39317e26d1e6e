"""png-folder: a folder of small PNG files, decoded and augmented on every access.

``ITEMS`` PNG files (``SIZE`` x ``SIZE`` RGB, a class per file as in an
ImageFolder) are written once into the benchmark's data directory by
``setup()`` (``cleanup()`` removes them). Each access opens one file, decodes
it with Pillow (zlib inflate and PNG's line filters), takes a random
``CROP`` x ``CROP`` crop, flips it half the time and normalises it per channel
with numpy: the usual small-image pipeline (CIFAR or icon-sized images stored
as files).

What should matter: the decoding and augmenting is real CPU work, about as
costly per sample as the small CNN's step, so workers pay up to the cores, and
beyond that only take CPU from the training threads (and from each other). The
files are small and, once written, in the page cache: reading them costs
little beside decoding.

    autotune search benchmarks/workloads/png_folder.py
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

ITEMS = 2000
SIZE = 64
CROP = 56
CLASSES = 10
MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32)
STD = np.array([0.25, 0.25, 0.25], dtype=np.float32)
batch_size = 32
_NAME = f"png-{ITEMS}x{SIZE}"


def _image(index: int) -> np.ndarray:
    """A synthetic image: a coarse random colour field, upsampled, with noise."""
    rng = np.random.default_rng(index)
    coarse = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((SIZE, SIZE), Image.Resampling.BICUBIC))
    noise = rng.integers(-8, 9, size=smooth.shape, dtype=np.int16)
    return (smooth.astype(np.int16) + noise).clip(0, 255).astype(np.uint8)


def setup() -> Path:
    """Write the PNG files once (atomically, so concurrent probes agree); returns
    their folder."""
    folder = data_root() / _NAME
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{_NAME}-", dir=folder.parent))
    for index in range(ITEMS):
        Image.fromarray(_image(index)).save(scratch / f"{index % CLASSES}-{index:05d}.png")
    try:
        scratch.rename(folder)
    except OSError:  # another process finished first: use its files
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def cleanup() -> None:
    """Remove the PNG files."""
    shutil.rmtree(data_root() / _NAME, ignore_errors=True)


class PngFolder(Dataset[tuple[torch.Tensor, int]]):
    """PNG files decoded, cropped, flipped and normalised on every access."""

    def __init__(self, folder: Path) -> None:
        self.paths = sorted(folder.glob("*.png"))
        self.labels = [int(path.name.split("-")[0]) for path in self.paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng()
        with Image.open(self.paths[index]) as file:
            pixels = np.asarray(file.convert("RGB"), dtype=np.float32) / 255.0
        top, left = rng.integers(0, SIZE - CROP + 1, size=2)
        pixels = pixels[top : top + CROP, left : left + CROP]
        if rng.random() < 0.5:
            pixels = pixels[:, ::-1]
        pixels = (pixels - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), self.labels[index]


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return PngFolder(setup())


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, CLASSES),
    )
