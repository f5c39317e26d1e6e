"""heavy-augment: a chain of CPU augmentations per item, on images made on the fly.

Each item starts as a ``SIZE`` x ``SIZE`` RGB image made from a seeded
generator (a smooth colour field with shapes), then goes through the kind of
chain a strong-augmentation recipe applies with Pillow and numpy: a random
resized crop to ``CROP`` x ``CROP``, a rotation of up to 20 degrees, colour
jitter (brightness, contrast, saturation), a Gaussian blur, a horizontal flip,
additive noise, a random erased patch and per-channel normalisation. That is
several milliseconds of CPU per item, a few times what the small CNN spends
training on it.

What should matter: the loader is CPU-bound and heavier than the model, so
workers pay up to the cores and not beyond (more only share the same cores),
and the training process should keep few threads so that the workers have the
CPUs. Prefetching cannot make up for too few workers; the batch size changes
little.

    autotune search benchmarks/workloads/heavy_augment.py
"""

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter
from torch import nn
from torch.utils.data import Dataset

ITEMS = 2048
SIZE = 128
CROP = 96
CLASSES = 10
MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32)
STD = np.array([0.25, 0.25, 0.25], dtype=np.float32)
batch_size = 32


def _image(index: int) -> Image.Image:
    """A synthetic image: a smooth colour field with a few discs of flat colour."""
    rng = np.random.default_rng(index)
    coarse = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    image = np.array(Image.fromarray(coarse).resize((SIZE, SIZE), Image.Resampling.BICUBIC))
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for _ in range(3):
        cy, cx = rng.integers(0, SIZE, size=2)
        radius = rng.integers(SIZE // 10, SIZE // 4)
        image[(yy - cy) ** 2 + (xx - cx) ** 2 < radius**2] = rng.integers(0, 256, size=3)
    return Image.fromarray(image)


class AugmentedImages(Dataset[tuple[torch.Tensor, int]]):
    """Images made and heavily augmented on every access."""

    def __init__(self, items: int = ITEMS) -> None:
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng()
        image = _image(index)
        # Random resized crop: 35-100% of the area, aspect ratio 3/4 to 4/3.
        area = rng.uniform(0.35, 1.0) * SIZE * SIZE
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        width = int(min(SIZE, round(np.sqrt(area * aspect))))
        height = int(min(SIZE, round(np.sqrt(area / aspect))))
        left = int(rng.integers(0, SIZE - width + 1))
        top = int(rng.integers(0, SIZE - height + 1))
        box = (left, top, left + width, top + height)
        image = image.resize((CROP, CROP), Image.Resampling.BILINEAR, box=box)
        image = image.rotate(float(rng.uniform(-20, 20)), Image.Resampling.BILINEAR)
        image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.6, 1.4))
        image = ImageEnhance.Contrast(image).enhance(rng.uniform(0.6, 1.4))
        image = ImageEnhance.Color(image).enhance(rng.uniform(0.6, 1.4))
        image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.1, 1.5))))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(image, dtype=np.float32) / 255.0
        pixels = pixels + rng.normal(0, 0.02, size=pixels.shape).astype(np.float32)
        side = int(rng.integers(CROP // 8, CROP // 3))
        top, left = rng.integers(0, CROP - side, size=2)
        pixels[top : top + side, left : left + side] = rng.uniform(0, 1, size=3)
        pixels = (pixels - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), index % CLASSES


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return AugmentedImages()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, CLASSES),
    )
