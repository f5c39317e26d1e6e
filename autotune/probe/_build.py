"""Building a probe's pieces inside the probe process: the workload, the dataset, the
model, the batches across epochs, the threads; shared by a probe alone and each DDP rank."""

from __future__ import annotations

import io
import itertools
import multiprocessing
import os
import pickle
import random
from collections.abc import Callable, Iterator, Sized
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.distributed import DistributedSampler

from autotune.probe._protocol import WorkloadSource
from autotune.probe._train import ContractError, PieceError, batch_length, blame
from autotune.settings import fix_allocator, is_iterable_dataset
from autotune.workload import Workload, load_config


def materialize(source: WorkloadSource) -> Workload:
    """The workload, from its config file or its pickled form.

    Pickled pieces come back with every tensor on the CPU: a model built on a GPU
    (``trainer.model`` under Hugging Face) is pickled with its CUDA storages, which a
    plain unpickle restores on the GPU they came from, ``cuda:0`` in every probe and
    every rank, beside the copy :func:`make_model` moves to the probe's own device.
    """
    if source.config_path is not None:
        return load_config(source.config_path).workload
    assert source.pickled is not None
    workload: Workload = _CpuUnpickler(io.BytesIO(source.pickled)).load()
    return workload


def _storage_on_cpu(data: bytes) -> Any:
    """A tensor storage pickled by torch, restored on the CPU whatever its device."""
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


class _CpuUnpickler(pickle.Unpickler):
    """Unpickles as :func:`pickle.loads` does, but restores tensor storages on the CPU
    (torch pickles each storage as a call of ``torch.storage._load_from_bytes``)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _storage_on_cpu
        return super().find_class(module, name)


class SamplerCounts:
    """The samples in each batch of a map-style loader's epoch, counted from its sampler:
    ``batch_size`` indices a batch, and what is left of the sampler's indices in the
    last one unless ``drop_last``. Counted, not read from the batch's tensors, which
    need not be batch-major (a ``(sequence, batch)`` tensor first)."""

    def __init__(self, indices: int, batch_size: int, drop_last: bool) -> None:
        self.indices = indices
        self.batch_size = batch_size
        self.drop_last = drop_last

    def epoch(self) -> Iterator[int]:
        """The samples of each batch of one epoch, in order."""
        full, rest = divmod(self.indices, self.batch_size)
        yield from itertools.repeat(self.batch_size, full)
        if rest and not self.drop_last:
            yield rest


def rank_sampler(
    dataset: Any, shard: tuple[int, int] | None, seed: int
) -> DistributedSampler[Any] | None:
    """The sampler of rank ``shard[1]`` of ``shard[0]`` over a map-style ``dataset``, as a
    DDP rank draws its part of each epoch; None without a shard or for an IterableDataset
    (which DDP does not split)."""
    if shard is None or is_iterable_dataset(dataset):
        return None
    ranks, rank = shard
    return DistributedSampler(dataset, num_replicas=ranks, rank=rank, seed=seed)


def sampler_counts(loader: object) -> SamplerCounts | None:
    """How to count the samples of ``loader``'s batches from its sampler; None where it
    has none to count (an IterableDataset, no automatic batching, a sampler of no
    length): its batches' samples are then read from their tensors."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return None
    if not loader.batch_size or not isinstance(loader.sampler, Sized):
        return None
    return SamplerCounts(len(loader.sampler), loader.batch_size, loader.drop_last)


class BatchStream:
    """Batches from a loader across epochs, each with its samples: a new epoch starts
    when one ends.

    Args:
        loader: what to iterate (a DataLoader, or a wrapper of one).
        piece: what a failure while loading is blamed on.
        counts: the samples of each batch, from the loader's sampler (:func:`sampler_counts`);
            None: read from each batch's tensors (:func:`batch_length`), else ``default_n``.
        default_n: the samples of a batch whose tensors do not tell.
        on_workers: told this process's children (the loader's workers among them) at
            the start of each epoch; None: not told.
    """

    def __init__(
        self,
        loader: Any,
        piece: str,
        *,
        counts: SamplerCounts | None = None,
        default_n: int = 1,
        on_workers: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.loader = loader
        self.piece = piece
        self.counts = counts
        self.default_n = default_n
        self.on_workers = on_workers
        self.iterator: Any = None
        self.sizes: Iterator[int] = iter(())
        self.epochs = 0

    def next(self) -> tuple[Any, int]:
        """The next batch and its samples."""
        with blame(self.piece):
            if self.iterator is None:
                self._begin()
            try:
                batch = next(self.iterator)
            except StopIteration:
                self.epochs += 1
                self._begin()
                try:
                    batch = next(self.iterator)
                except StopIteration:
                    raise ContractError("the dataset yielded no batches") from None
        counted = next(self.sizes, None)
        return batch, counted or batch_length(batch) or self.default_n

    def _begin(self) -> None:
        """A new epoch: a new iterator, and the sampler's counts from its start."""
        self.iterator = iter(self.loader)
        self.sizes = self.counts.epoch() if self.counts else iter(())
        if self.on_workers is not None:
            # The iterator has started its workers; one may end before the search lists
            # the probe's processes, and what it leaves in /dev/shm is named by its pid.
            # (multiprocessing's own list: no scan of /proc at each epoch.)
            self.on_workers([child.pid for child in multiprocessing.active_children() if child.pid])

    def close(self) -> None:
        """End the epoch under way: a non-persistent loader's workers exit now."""
        self.iterator = None


class EpochLoader:
    """A loader whose DistributedSampler moves to the next epoch at each new iteration,
    as a training loop calls ``sampler.set_epoch(epoch)``."""

    def __init__(self, loader: Any, sampler: DistributedSampler[Any] | None) -> None:
        self.loader = loader
        self.sampler = sampler
        self.epoch = 0

    def __iter__(self) -> Iterator[Any]:
        if self.sampler is not None:
            self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)


def workers_sender(send: Callable[[tuple[str, Any]], None]) -> Callable[[list[int]], None]:
    """A BatchStream's ``on_workers`` that sends the pids not sent before to the search, as
    a "workers" event of the probe protocol."""
    sent: set[int] = set()

    def on_workers(pids: list[int]) -> None:
        new = [pid for pid in pids if pid not in sent]
        if new:
            sent.update(new)
            send(("workers", new))

    return on_workers


def seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_dataset(workload: Workload) -> Any:
    with blame("dataset()"):
        dataset = workload.make_dataset()
    from torch.utils.data import Dataset

    map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if not isinstance(dataset, Dataset | IterableDataset) and not map_style:
        raise PieceError(
            "dataset()",
            ContractError(
                f"dataset() returned {type(dataset).__name__}; expected a "
                "torch.utils.data.Dataset (or an object with __getitem__ and __len__)"
            ),
        )
    return dataset


def make_model(workload: Workload, device: torch.device) -> nn.Module:
    with blame("model()"):
        model = workload.make_model()
        if not isinstance(model, nn.Module):
            raise ContractError(
                f"model() returned {type(model).__name__}; expected a torch.nn.Module"
            )
        model = model.to(device)
        model.train()
    return model


def apply_threads(threads: int | None, cpus: tuple[int, ...] | None) -> None:
    """torch's intra-op threads: the config's, else one per CPU of the process's share
    (what a new process pinned to those CPUs, or started by torchrun with
    OMP_NUM_THREADS set to its share, would use)."""
    if threads is not None:
        torch.set_num_threads(threads)
    elif cpus:
        torch.set_num_threads(len(cpus))


def placement() -> dict[str, Any]:
    """Where this process runs: its CPU affinity, torch's threads, its visible GPUs, and
    the C allocator's rule (``fix_allocator``'s answer: "fixed", "user's", "off"...)."""
    return {
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "allocator": fix_allocator(),
    }


def loading_piece(workload: Workload) -> str:
    """What a failure while loading a batch is blamed on."""
    if workload.collate_fn is not None:
        return "loading a batch (dataset or collate_fn)"
    return "loading a batch (dataset)"
