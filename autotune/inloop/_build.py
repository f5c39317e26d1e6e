"""The DataLoaders behind the online loader: built for one config, kept between
epochs when their workers persist, cut short when a switch hands over to the next
config, and shut down cleanly when abandoned.

An abandoned iterator's workers are stopped at once (``_shutdown_workers``, what
torch itself calls at the end of an epoch), not left to the garbage collector: the
next config starts its own workers right away, and two sets at once would compete
for the CPUs being measured, and hold their shared memory meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader

from autotune.inloop._order import RemainingBatches
from autotune.settings import Settings, fix_allocator, worker_init


@dataclasses.dataclass(frozen=True)
class Data:
    """What every DataLoader of one online loader shares: the user's data and batching."""

    dataset: Any
    batch_size: int
    collate_fn: Callable[[list[Any]], Any] | None = None
    drop_last: bool = False
    worker_init_fn: Callable[[int], None] | None = None


@dataclasses.dataclass
class _Kept:
    settings: Settings
    loader: DataLoader[Any]
    batches: RemainingBatches | None


def shut_down(iterator: Iterator[Any] | None) -> None:
    """Stop an iterator's worker processes and its pin-memory thread, if it has any."""
    stop = getattr(iterator, "_shutdown_workers", None)
    if callable(stop):
        stop()


class Loaders:
    """Builds the iterator of a config; keeps a persistent-worker loader for the next
    epoch and stops everything else it is told to.

    Args:
        data: the dataset and how to batch it.
    """

    def __init__(self, data: Data) -> None:
        self.data = data
        self._kept: _Kept | None = None
        self._cuttable: tuple[Iterator[Any], RemainingBatches] | None = None
        """The last iterator started with workers and not kept, and its batches."""

    def start(self, settings: Settings, batches: Sequence[list[int]] | None) -> Iterator[Any]:
        """An iterator of ``settings`` over ``batches`` (a map-style dataset's remaining
        batches) or over the whole dataset (an IterableDataset: ``batches`` is None)."""
        kept = self._kept
        if kept is not None and kept.settings == settings:
            if kept.batches is not None and batches is not None:
                kept.batches.batches = batches
            return self._iter(kept.loader)
        self.release()
        sampler = RemainingBatches(batches) if batches is not None else None
        loader = self._build(settings, sampler)
        if settings.persistent_workers and settings.num_workers > 0:
            self._kept = _Kept(settings, loader, sampler)
        iterator = self._iter(loader)
        if sampler is not None and settings.num_workers > 0 and self._kept is None:
            self._cuttable = (iterator, sampler)
        return iterator

    def cut(self, iterator: Iterator[Any] | None) -> int | None:
        """Stop ``iterator`` from sending its workers more batches; returns how many it
        took from its batches (handed over, or in its workers' hands), after which it
        ends. None when it cannot be cut (no workers, persistent ones, or an
        IterableDataset): then stop it."""
        if self._cuttable is None or self._cuttable[0] is not iterator:
            return None
        _, sampler = self._cuttable
        self._cuttable = None
        return sampler.cut()

    def stop(self, iterator: Iterator[Any] | None) -> None:
        """Stop ``iterator``'s workers (a switch in mid-epoch, or the loader closed)."""
        kept = self._kept
        if self._cuttable is not None and self._cuttable[0] is iterator:
            self._cuttable = None
        if kept is not None and getattr(kept.loader, "_iterator", None) is iterator:
            self.release()
        else:
            shut_down(iterator)

    def release(self) -> None:
        """Stop the workers kept between epochs, if any."""
        kept, self._kept = self._kept, None
        if kept is not None:
            shut_down(getattr(kept.loader, "_iterator", None))
            kept.loader._iterator = None

    def _build(self, settings: Settings, sampler: RemainingBatches | None) -> DataLoader[Any]:
        kwargs = settings.dataloader_kwargs()
        data = self.data
        if sampler is not None:
            # batch_sampler excludes batch_size and drop_last: the batches are made already.
            del kwargs["batch_size"]
            kwargs["batch_sampler"] = sampler
        else:
            kwargs["drop_last"] = data.drop_last
        fix_allocator()  # as every loader autotune builds (autotune.settings._allocator)
        with _quiet_worker_count():
            return DataLoader(
                data.dataset,
                collate_fn=data.collate_fn,
                worker_init_fn=worker_init(settings.worker_threads, data.worker_init_fn),
                **kwargs,
            )

    @staticmethod
    def _iter(loader: DataLoader[Any]) -> Iterator[Any]:
        with _quiet_worker_count():
            return iter(loader)


@contextlib.contextmanager
def _quiet_worker_count() -> Iterator[None]:
    """Torch warns past its suggested worker count; the climb measures instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield
