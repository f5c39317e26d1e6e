"""Capping the native thread pools inside each DataLoader worker.

torch sets its own intra-op threads to 1 in a DataLoader worker, but the other
native pools a dataset may call are left alone: numpy's OpenBLAS (or MKL), and the
OpenMP runtimes of other libraries, each start one thread per core, in every worker.
With several workers on a few cores those threads fight for the cores, and a dataset
that calls them can load several times slower with workers than without (the runs:
``docs/decisions.md``). ``threadpoolctl`` finds and caps those pools at one thread a
worker, whichever libraries the worker has loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import threadpoolctl
import torch

WorkerInit = Callable[[int], None]
"""What DataLoader calls in each worker as it starts, with the worker's id."""


@dataclasses.dataclass(frozen=True)
class WorkerThreads:
    """A DataLoader ``worker_init_fn`` that caps the worker's native thread pools
    (BLAS, OpenMP, torch's own) at ``limit`` threads, then calls ``then`` (the user's
    own ``worker_init_fn``), if any.

    A plain value, so it pickles to workers started by ``spawn`` or ``forkserver``.

    Args:
        limit: threads per pool, >= 1.
        then: the ``worker_init_fn`` to call after, with the worker's id.
    """

    limit: int
    then: WorkerInit | None = None

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"The worker thread limit is {self.limit}, but must be >= 1.")

    def __call__(self, worker_id: int) -> None:
        threadpoolctl.threadpool_limits(limits=self.limit)
        torch.set_num_threads(self.limit)
        if self.then is not None:
            self.then(worker_id)


def worker_init(limit: int | None, then: WorkerInit | None) -> WorkerInit | None:
    """The ``worker_init_fn`` of a loader whose workers' pools are capped at ``limit``
    threads (None: left as the libraries start them), calling the user's ``then``."""
    if limit is None:
        return then
    return WorkerThreads(limit, then)
