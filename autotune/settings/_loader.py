"""Building the DataLoader a config describes, and the data-echo wrapper.

The probe and the user's tuned loader are built by the same function, so what
was measured is what the user gets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from autotune.settings._allocator import fix_allocator
from autotune.settings._worker_threads import worker_init


class EchoLoader:
    """Yields every batch of a DataLoader ``factor`` times in a row (data echoing).

    Echoing trades fresh samples for steps when the loader cannot keep up with
    the model: each batch is trained on ``factor`` times (Choi et al., 2019,
    "Faster Neural Network Training with Data Echoing"). It changes what is
    learned, so autotune only tries it when asked.

    Args:
        loader: the DataLoader to echo.
        factor: how many times each batch is yielded, >= 1.
    """

    def __init__(self, loader: DataLoader[Any], factor: int) -> None:
        if factor < 1:
            raise ValueError(f"The echo factor is {factor}, but must be >= 1.")
        self.loader = loader
        self.factor = factor

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            for _ in range(self.factor):
                yield batch

    def __len__(self) -> int:
        return len(self.loader) * self.factor

    @property
    def dataset(self) -> Any:
        """The dataset of the wrapped loader."""
        return self.loader.dataset

    @property
    def batch_size(self) -> int | None:
        """The batch size of the wrapped loader."""
        return self.loader.batch_size


def is_iterable_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is consumed by iteration (so it cannot be shuffled by the loader)."""
    return isinstance(dataset, IterableDataset)


def build_loader(
    dataset: Any,
    dataloader_kwargs: Mapping[str, Any],
    *,
    echo: int = 1,
    seed: int | None = None,
    worker_threads: int | None = None,
    **overrides: Any,
) -> DataLoader[Any] | EchoLoader:
    """The DataLoader (echoed when ``echo > 1``) that a config describes.

    Args:
        dataset: the dataset to load.
        dataloader_kwargs: the config's DataLoader keywords (``Settings.dataloader_kwargs``).
        echo: the config's data-echo factor.
        seed: seeds the shuffling generator, for repeatable probes.
        worker_threads: the threads of each worker's native pools (``Settings.worker_threads``);
            a ``worker_init_fn`` among ``overrides`` runs after the cap.
        **overrides: DataLoader keywords that win over the settings.

    It fixes the C allocator's thresholds of this process first (:func:`fix_allocator`):
    every config is measured, and every tuned loader runs, under that rule.
    """
    fix_allocator()
    kwargs: dict[str, Any] = dict(dataloader_kwargs)
    kwargs["shuffle"] = not is_iterable_dataset(dataset)
    if seed is not None and kwargs["shuffle"]:
        generator = torch.Generator()
        generator.manual_seed(seed)
        kwargs["generator"] = generator
    if kwargs.get("pin_memory") and not torch.cuda.is_available():
        # Pinning needs an accelerator; the settings may come from a GPU machine.
        kwargs["pin_memory"] = False
    kwargs.update(overrides)
    if kwargs.get("num_workers", 0) > 0:
        kwargs["worker_init_fn"] = worker_init(worker_threads, kwargs.get("worker_init_fn"))
    if kwargs.get("sampler") is not None or kwargs.get("batch_sampler") is not None:
        kwargs.pop("shuffle", None)
        kwargs.pop("generator", None)
    loader: DataLoader[Any] = DataLoader(dataset, **kwargs)
    if echo > 1:
        return EchoLoader(loader, echo)
    return loader
