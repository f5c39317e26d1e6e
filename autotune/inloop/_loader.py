"""OnlineLoader: iterates like a DataLoader, and changes DataLoaders as its tuner asks.

A map-style dataset's epoch order is drawn once (:mod:`autotune.inloop._order`);
a switch in mid-epoch stops the old iterator's workers and starts the new config on
the batches the user has not had, so nothing is dropped or repeated: batches the old
workers had prefetched are thrown away with them and loaded again by the new ones.
An IterableDataset cannot be resumed where another iterator stopped, so it changes
config only between epochs.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import torch
from torch.utils.data import IterableDataset, Sampler

from autotune.inloop._build import Data, Loaders
from autotune.inloop._climb import without_persistence
from autotune.inloop._order import EpochOrder, epoch_length
from autotune.inloop._tuner import Tuner
from autotune.settings._settings import Settings


class OnlineLoader:
    """A DataLoader that tunes its own loader knobs inside the user's training loop.

    Made by :func:`autotune.online`; iterate it once per epoch as a DataLoader.

    Args:
        data: the dataset and how to batch it.
        sampler: the epoch's index order (None for an IterableDataset).
        tuner: decides which config runs.
    """

    def __init__(self, data: Data, sampler: Sampler[int] | None, tuner: Tuner) -> None:
        self._data = data
        self.sampler = sampler
        """The sampler of the epoch's order: the user's, or a Random/SequentialSampler."""
        self._tuner = tuner
        self._loaders = Loaders(data)
        # Weak: the epoch keeps its loader alive (``for b in autotune.online(...)`` holds
        # only the epoch), and a strong reference back would make a cycle that only the
        # garbage collector frees, workers and all.
        self._epoch: weakref.ref[_Epoch] | None = None

    # ------------------------------------------------------------ as a DataLoader
    @property
    def dataset(self) -> Any:
        return self._data.dataset

    @property
    def batch_size(self) -> int:
        return self._data.batch_size

    @property
    def drop_last(self) -> bool:
        return self._data.drop_last

    def __len__(self) -> int:
        length = epoch_length(self.dataset, self.sampler, self.batch_size, self.drop_last)
        if length is None:
            raise TypeError(
                f"{type(self.dataset).__name__} has no len(), so neither has its loader"
            )
        return length

    def __iter__(self) -> Iterator[Any]:
        last = self._epoch() if self._epoch is not None else None
        if last is not None:
            last.close()  # the last epoch was left before its end
        order = None
        if self.sampler is not None and not isinstance(self.dataset, IterableDataset):
            order = EpochOrder.draw(self.sampler, self.batch_size, self.drop_last)
        epoch = _Epoch(self, order)
        self._epoch = weakref.ref(epoch)
        return epoch

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to the sampler (a DistributedSampler reshuffles by it)."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    # ------------------------------------------------------------ tuning
    @property
    def settings(self) -> Settings:
        """The config running now, or chosen to run next."""
        return self._tuner.wanted

    @property
    def running(self) -> Settings | None:
        """The config of the DataLoader that loaded the last batch; None before the first."""
        return self._tuner.running

    @property
    def tuning(self) -> bool:
        """Whether a climb is under way."""
        return self._tuner.climb is not None

    # ------------------------------------------------------------ the end
    def close(self) -> None:
        """Stop every worker process now (persistent workers otherwise live on until the
        loader is garbage collected)."""
        epoch = self._epoch() if self._epoch is not None else None
        if epoch is not None:
            epoch.close()
        self._epoch = None
        self._loaders.release()

    def __enter__(self) -> OnlineLoader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Attributes may be missing when __init__ failed.
        if getattr(self, "_loaders", None) is not None:
            self.close()


class _Epoch(Iterator[Any]):
    """One pass over the data, across as many DataLoader iterators as the tuner asks.

    Args:
        owner: its loader, kept alive while the epoch is.
        order: the epoch's batches (a map-style dataset), or None (an IterableDataset).
    """

    def __init__(self, owner: OnlineLoader, order: EpochOrder | None) -> None:
        self._owner = owner
        self._tuner = owner._tuner
        self._loaders = owner._loaders
        self._order = order
        self._batch_size = owner.batch_size
        self._iterator: Iterator[Any] | None = None
        self._running: Settings | None = None
        self._batches = 0
        self._done = False

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        self._tuner.asking(self._tuner.clock.now())
        wanted = self._tuner.wanted
        if self._iterator is None:
            self._start(wanted)
        elif self._may_switch() and without_persistence(wanted) != self._running:
            self._loaders.stop(self._iterator)
            self._start(wanted)
        assert self._iterator is not None  # started above
        asked = self._tuner.clock.now()
        asked_cpu = time.thread_time()
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._end()
            raise
        samples = len(self._order.hand()) if self._order else batch_len(batch, self._batch_size)
        self._batches += 1
        self._tuner.fetched(asked, samples, cpu_seconds=time.thread_time() - asked_cpu)
        return batch

    def _may_switch(self) -> bool:
        # In mid-epoch, only where the rest of the order is known, and some of it is left
        # (a loader started for no batch would start its workers for nothing).
        return self._order is not None and self._order.handed < len(self._order)

    def _start(self, settings: Settings) -> None:
        batches = self._order.remaining() if self._order is not None else None
        self._iterator = self._loaders.start(settings, batches)
        self._running = without_persistence(settings)
        self._tuner.started(settings)

    def _end(self) -> None:
        # Torch stops the workers of an exhausted iterator itself, but persistent ones.
        self._done = True
        self._iterator = None
        self._tuner.epoch_ended(self._batches)

    def close(self) -> None:
        """Leave the epoch before its end: stop its workers."""
        if not self._done:
            self._loaders.stop(self._iterator)
            self._iterator = None
            self._done = True


def batch_len(batch: Any, default: int) -> int:
    """Samples in a collated batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else default
    if isinstance(batch, Mapping):
        return batch_len(next(iter(batch.values()), None), default)
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)) and batch:
        return batch_len(batch[0], default)
    return default
