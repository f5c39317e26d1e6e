"""iterable-latency: a stream of records, each waiting a few ms, read by an IterableDataset.

The records come from "a stream" (a log, a message queue, shards on object
storage): each costs ``LATENCY_S`` of waiting that leaves the CPU free, then a
little decoding (bytes to a float32 vector). The dataset is an
``IterableDataset`` that shards itself by ``torch.utils.data.get_worker_info()``,
so that every worker yields its own share of the ``RECORDS`` records once per
epoch (without it, each worker would yield them all). It is not shuffled, and
each worker makes whole batches from its own share.

What should matter: the waits, so more workers than cores pay, as on io-bound,
until the MLP is the bottleneck. An epoch is short once there are many workers
(each worker's share is ``RECORDS / num_workers`` records), so workers that
are not persistent are started again often. ``prefetch_factor`` decides how
far each worker runs ahead; it matters little while a batch takes a worker
``batch_size * LATENCY_S`` to make.

    autotune search benchmarks/workloads/iterable_latency.py
"""

import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn
from torch.utils.data import IterableDataset, get_worker_info

RECORDS = 2048
LATENCY_S = 0.004
FEATURES = 256
CLASSES = 10
batch_size = 32


def _record(index: int) -> bytes:
    """One record as it arrives: a label byte, then float16 features."""
    rng = np.random.default_rng(index)
    features = rng.standard_normal(FEATURES).astype(np.float16)
    return bytes([index % CLASSES]) + features.tobytes()


class RecordStream(IterableDataset[tuple[torch.Tensor, int]]):
    """Every record once per epoch; worker ``k`` of ``n`` reads records ``k, k+n, k+2n...``."""

    def __init__(self, records: int = RECORDS, latency: float = LATENCY_S) -> None:
        self.records = records
        self.latency = latency

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        worker = get_worker_info()
        share, shares = (worker.id, worker.num_workers) if worker else (0, 1)
        for index in range(share, self.records, shares):
            time.sleep(self.latency)  # the wait for the record to arrive
            record = _record(index)
            features = np.frombuffer(record, dtype=np.float16, offset=1).astype(np.float32)
            yield torch.from_numpy(features), record[0]


def dataset() -> IterableDataset[tuple[torch.Tensor, int]]:
    return RecordStream()


def model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, CLASSES),
    )
