"""numpy-memmap: rows of a memory-mapped numpy file, read by index, and an MLP.

``setup()`` writes ``ITEMS`` rows of ``FEATURES`` float32 features (about
50 MB) to a raw file in the benchmark's data directory, and the labels to a
small ``.npy`` beside it (``cleanup()`` removes both): precomputed features or
embeddings, stored once and read many times. The dataset opens the file with
``numpy.memmap`` lazily, once in each process that reads it, and never
pickles the mapping: a memmap pickled to a worker (spawn or forkserver start
methods) arrives as a full in-memory copy of the array, and one made before a
fork is shared by processes that did not make it. Each item copies one row out
of the mapping.

What should matter: once written the file sits in the page cache, so an item
costs a page fault at most and a 3 KB copy, microseconds; the per-item Python
and the collate cost more than the read. Loading is cheap next to the MLP, so
workers buy little and take CPU from the training threads; the batch size and
the threads (and AMP) move the figure most.

    autotune search benchmarks/workloads/numpy_memmap.py
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from _data import data_root

ITEMS = 16384
FEATURES = 784
CLASSES = 10
BLOCK = 2048
batch_size = 64
_NAME = f"features-{ITEMS}x{FEATURES}-f32"


def setup() -> Path:
    """Write the features (raw float32) and labels (``.npy``) once, atomically; returns the
    features' path."""
    path = data_root() / f"{_NAME}.bin"
    labels = data_root() / f"{_NAME}-labels.npy"
    if path.exists() and labels.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{_NAME}-", dir=path.parent)
    os.close(handle)
    rows = np.memmap(scratch, dtype=np.float32, mode="w+", shape=(ITEMS, FEATURES))
    for start in range(0, ITEMS, BLOCK):
        rng = np.random.default_rng(start)
        rows[start : start + BLOCK] = rng.standard_normal((BLOCK, FEATURES), dtype=np.float32)
    rows.flush()
    del rows
    handle, scratch_labels = tempfile.mkstemp(prefix=f".{_NAME}-", suffix=".npy", dir=path.parent)
    os.close(handle)
    np.save(scratch_labels, np.arange(ITEMS, dtype=np.int64) % CLASSES)
    os.replace(scratch_labels, labels)
    os.replace(scratch, path)
    return path


def cleanup() -> None:
    """Remove the features and labels."""
    (data_root() / f"{_NAME}.bin").unlink(missing_ok=True)
    (data_root() / f"{_NAME}-labels.npy").unlink(missing_ok=True)


class MemmapRows(Dataset[tuple[torch.Tensor, int]]):
    """One row of the memory-mapped file per item; the file is mapped lazily in each process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.labels = np.load(path.with_name(f"{_NAME}-labels.npy"))
        self._rows: np.memmap | None = None
        self._pid: int | None = None

    def rows(self) -> np.memmap:
        """The mapping, made once in each process."""
        if self._rows is None or self._pid != os.getpid():
            self._rows = np.memmap(self.path, dtype=np.float32, mode="r", shape=(ITEMS, FEATURES))
            self._pid = os.getpid()
        return self._rows

    def __getstate__(self) -> dict[str, object]:
        # Send workers the path, never the mapping (pickling a memmap copies the array).
        return {**self.__dict__, "_rows": None, "_pid": None}

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.array(self.rows()[index])), int(self.labels[index])


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return MemmapRows(setup())


def model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, CLASSES),
    )
