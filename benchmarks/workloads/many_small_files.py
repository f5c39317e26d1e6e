"""many-small-files: one tiny ``.npy`` file per sample, opened and read on every access.

``setup()`` writes ``ITEMS`` files of ``FEATURES`` float32 values each (about
400 bytes with the ``.npy`` header) into one folder of the benchmark's data
directory (``cleanup()`` removes it): what a dataset exported as one file per
sample (feature vectors, keypoints, small spectra) looks like. Each access
opens one file with ``numpy.load``, parses its header and reads its payload.

What should matter: the per-file overhead, not the bytes. Each item is an
open, a read and a close (system calls and a header parse: with the files in
the page cache, a fraction of a millisecond, mostly Python and the kernel),
for a sample the MLP trains on in about as long. Workers take that off the
training process up to the cores; with the files on a slower disk or a
network file system, each open would wait and more workers than cores would
pay, as on io-bound. Larger batches spread the per-batch costs over more
samples.

    autotune search benchmarks/workloads/many_small_files.py
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).parent))
from _data import data_root

ITEMS = 5000
FEATURES = 64
CLASSES = 10
batch_size = 32
_NAME = f"npy-{ITEMS}x{FEATURES}"


def setup() -> Path:
    """Write the files once (atomically, so concurrent probes agree); returns their folder."""
    folder = data_root() / _NAME
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{_NAME}-", dir=folder.parent))
    rows = np.random.default_rng(0).standard_normal((ITEMS, FEATURES), dtype=np.float32)
    for index, row in enumerate(rows):
        np.save(scratch / f"{index:05d}.npy", row)
    try:
        scratch.rename(folder)
    except OSError:  # another process finished first: use its files
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def cleanup() -> None:
    """Remove the files."""
    shutil.rmtree(data_root() / _NAME, ignore_errors=True)


class SmallFiles(Dataset[tuple[torch.Tensor, int]]):
    """One ``.npy`` file read per item."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        row = np.load(self.folder / f"{index:05d}.npy")
        return torch.from_numpy(row), index % CLASSES


def dataset() -> Dataset[tuple[torch.Tensor, int]]:
    return SmallFiles(setup())


def model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 256),
        nn.ReLU(),
        nn.Linear(256, 256),
        nn.ReLU(),
        nn.Linear(256, CLASSES),
    )
