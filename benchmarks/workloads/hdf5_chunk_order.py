"""Reference for hdf5-chunked: the same file and model, read in chunk order.

Not one of the benchmark's strategies: no DataLoader setting does this. An
IterableDataset visits the chunks in a random order and, within a chunk, its
rows in a random order, reading each chunk once; DataLoader workers share the
chunks out between them. This is what a chunk-aware sampler (or reading whole
chunks) buys over the random access of ``hdf5_chunked.py``.

    autotune search benchmarks/workloads/hdf5_chunk_order.py
"""

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

sys.path.insert(0, str(Path(__file__).parent))
import hdf5_chunked as base  # the sibling config: the same file and model

batch_size = base.batch_size
model = base.model
setup = base.setup
cleanup = base.cleanup


class ChunkOrderImages(IterableDataset):
    """Every row once per epoch, chunk by chunk; workers take every n-th chunk."""

    def __init__(self, path: Path) -> None:
        self.rows = base.ChunkedImages(path)
        self.epoch = 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        worker = get_worker_info()
        share, shares = (worker.id, worker.num_workers) if worker else (0, 1)
        rng = np.random.default_rng([self.epoch, os.getpid()])
        self.epoch += 1
        images = self.rows.images()
        starts = np.arange(0, len(self.rows), base.CHUNK)
        for start in rng.permutation(starts)[share::shares]:
            block = images[start : start + base.CHUNK]
            for offset in rng.permutation(len(block)):
                yield torch.from_numpy(block[offset]), int(self.rows.labels[start + offset])


def dataset() -> IterableDataset:
    return ChunkOrderImages(setup())
