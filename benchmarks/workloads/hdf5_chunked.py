"""hdf5-chunked: samples read one by one from a chunked, compressed HDF5 file.

The file (made once into a temporary directory by ``setup()``; ``cleanup()``
removes it) holds ``ITEMS`` images of 3x32x32 uint8 in chunks of ``CHUNK``
rows, gzip-compressed: a common layout for a dataset written once and read
many times. The dataset opens the file lazily in each process (an h5py handle
must not cross a fork) with h5py's default chunk cache, and reads one row per
item, as most training code does; the file is many times larger than the cache.

The trap: the DataLoader shuffles, so consecutive reads land in different
chunks, and h5py decompresses a whole chunk (``CHUNK`` rows) to return one
row. What the knobs can fix: workers decompress in parallel, up to the cores
there are; the training threads and the batch size move the balance between
the loader and the model. What they cannot fix: the access order. Reading in
chunk order (a sampler that visits the rows of one chunk together) decompresses
each chunk once for ``CHUNK`` samples, but the sampler is not one of autotune's
knobs, so no setting reaches that. ``hdf5_chunk_order.py`` reads the same
file that way; the benchmark measures it as a reference, outside the
strategies, to show how much the access order is worth.

    autotune search benchmarks/workloads/hdf5_chunked.py
"""

import os
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from _data import data_root

ITEMS = 16384
CHUNK = 128
SHAPE = (3, 32, 32)
CLASSES = 10
batch_size = 32
_NAME = f"images-{ITEMS}-chunk{CHUNK}.h5"


def _images(start: int, count: int) -> np.ndarray:
    """Smooth synthetic images with noise: they compress about as well as photos."""
    rng = np.random.default_rng(start)
    yy, xx = np.mgrid[0 : SHAPE[1], 0 : SHAPE[2]].astype(np.float32) / SHAPE[1]
    freq = rng.uniform(1, 4, size=(count, SHAPE[0], 1, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=(count, SHAPE[0], 1, 1)).astype(np.float32)
    images = (127 + 90 * np.sin(2 * np.pi * freq * (xx + yy) + phase)).astype(np.int16)
    images += rng.integers(-4, 5, size=images.shape, dtype=np.int16)
    return images.clip(0, 255).astype(np.uint8)


def setup() -> Path:
    """Write the HDF5 file once (atomically, so concurrent probes agree); returns its path."""
    path = data_root() / _NAME
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{_NAME}-", dir=path.parent)
    os.close(handle)
    with h5py.File(scratch, "w") as file:
        images = file.create_dataset(
            "images",
            shape=(ITEMS, *SHAPE),
            dtype=np.uint8,
            chunks=(CHUNK, *SHAPE),
            compression="gzip",
            compression_opts=4,
        )
        for start in range(0, ITEMS, CHUNK):
            images[start : start + CHUNK] = _images(start, CHUNK)
        file.create_dataset("labels", data=np.arange(ITEMS, dtype=np.int64) % CLASSES)
    os.replace(scratch, path)
    return path


def cleanup() -> None:
    """Remove the HDF5 file."""
    (data_root() / _NAME).unlink(missing_ok=True)


class ChunkedImages(Dataset):
    """One row of the HDF5 file per item; the file is opened lazily in each process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with h5py.File(path, "r") as file:
            self.labels = file["labels"][:]
        self._images: h5py.Dataset | None = None
        self._pid: int | None = None

    def images(self) -> h5py.Dataset:
        """The images dataset, opened once in each process (its chunk cache lives as long)."""
        if self._images is None or self._pid != os.getpid():
            self._images = h5py.File(self.path, "r")["images"]
            self._pid = os.getpid()
        return self._images

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(self.images()[index]), int(self.labels[index])


def dataset() -> Dataset:
    return ChunkedImages(setup())


def model() -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        # uint8 pixels are shipped as they are stored and scaled here (4x less to copy).
        _Scale(1 / 255),
        nn.Linear(int(np.prod(SHAPE)), 256),
        nn.ReLU(),
        nn.Linear(256, CLASSES),
    )


class _Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.float() * self.factor
