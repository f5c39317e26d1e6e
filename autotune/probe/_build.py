"""Building a probe's pieces inside the probe process: the workload, the dataset, the
model, the batches across epochs, the threads; shared by a probe alone and each DDP rank."""

from __future__ import annotations

import os
import pickle
import random
from typing import Any

import numpy as np
import torch
from torch import nn

from autotune.probe._protocol import WorkloadSource
from autotune.probe._train import ContractError, PieceError, blame
from autotune.workload._workload import Workload, load_config


def materialize(source: WorkloadSource) -> Workload:
    """The workload, from its config file or its pickled form."""
    if source.config_path is not None:
        return load_config(source.config_path).workload
    assert source.pickled is not None
    workload: Workload = pickle.loads(source.pickled)
    return workload


class BatchStream:
    """Batches from a loader across epochs: a new epoch starts when one ends."""

    def __init__(self, loader: Any, piece: str) -> None:
        self.loader = loader
        self.piece = piece
        self.iterator: Any = None
        self.epochs = 0

    def next(self) -> Any:
        with blame(self.piece):
            if self.iterator is None:
                self.iterator = iter(self.loader)
            try:
                return next(self.iterator)
            except StopIteration:
                self.epochs += 1
                self.iterator = iter(self.loader)
                try:
                    return next(self.iterator)
                except StopIteration:
                    raise ContractError("the dataset yielded no batches") from None

    def close(self) -> None:
        """End the epoch under way: a non-persistent loader's workers exit now."""
        self.iterator = None


def seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_dataset(workload: Workload) -> Any:
    with blame("dataset()"):
        dataset = workload.make_dataset()
    from torch.utils.data import Dataset, IterableDataset

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
    """Where this process runs: its CPU affinity, torch's threads, its visible GPUs."""
    return {
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def loading_piece(workload: Workload) -> str:
    """What a failure while loading a batch is blamed on."""
    if workload.collate_fn is not None:
        return "loading a batch (dataset or collate_fn)"
    return "loading a batch (dataset)"
