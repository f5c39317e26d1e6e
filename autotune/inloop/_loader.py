"""OnlineLoader: iterates like a DataLoader, and changes DataLoaders as its tuner asks.

A map-style dataset's epoch order is drawn once (:mod:`autotune.inloop._order`);
a switch in mid-epoch hands over: the old iterator sends its workers no more batches
and hands the user those it has sent them (its prefetch), while the new config's
workers start on the batches after those; then the old workers are stopped. Nothing
is dropped or repeated, nothing loaded is thrown away, and the new workers' start-up
overlaps the loop's steps on the old ones' batches. An IterableDataset cannot be
resumed where another iterator stopped, so it changes config only between epochs.
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
from autotune.settings import Settings


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
    def handing_over(self) -> Settings | None:
        """The config whose workers still hand over the batches they prefetched before a
        switch (their processes live until then); None when no switch is under way."""
        epoch = self._epoch() if self._epoch is not None else None
        return epoch.handing_over if epoch is not None else None

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
        self._started_at = 0
        """Batches handed this epoch when the running iterator started."""
        self._old: Iterator[Any] | None = None
        """The iterator being handed over from: it hands its prefetched batches first."""
        self.handing_over: Settings | None = None
        """The config of :attr:`_old`."""
        self._old_left = 0
        self._compared: Settings | None = None
        self._compared_differs = False
        self._finishing = False
        """The old iterator had sent its workers every batch left: it ends the epoch."""
        self._done = False
        self._begun = False
        """The epoch's first batch was asked for (the tuner was told the epoch starts)."""

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if not self._begun:
            self._begun = True
            self._tuner.epoch_starting(len(self._order) if self._order is not None else None)
        self._tuner.asking(self._tuner.clock.now())
        wanted = self._tuner.wanted
        if self._iterator is None:
            self._start(wanted, lead=0)
        elif (
            self._old is None
            and not self._finishing
            and self._may_switch()
            and self._differs(wanted)
        ):
            self._switch(wanted)
        assert self._iterator is not None  # started above
        asked = self._tuner.clock.now()
        asked_cpu = time.thread_time()
        try:
            batch = self._next_batch()
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

    def _differs(self, wanted: Settings) -> bool:
        """Whether ``wanted`` loads otherwise than the running config (persistence aside).
        Compared once per wanted config, not per step: a settled loader's steps should
        cost the loop nothing it can measure."""
        if wanted is not self._compared:
            self._compared, self._compared_differs = (
                wanted,
                (without_persistence(wanted) != self._running),
            )
        return self._compared_differs

    def _next_batch(self) -> Any:
        assert self._iterator is not None  # started by __next__
        if self._old is None:
            return next(self._iterator)
        batch = next(self._old)
        self._old_left -= 1
        if self._old_left == 0:
            self._stop_old()
        return batch

    def _stop_old(self) -> None:
        self._loaders.stop(self._old)
        self._old, self.handing_over = None, None

    def _switch(self, settings: Settings) -> None:
        """Hand over from the running iterator to one of ``settings``: the old one keeps
        the batches it has sent its workers, the new one starts after them."""
        old = self._iterator
        taken = self._loaders.cut(old)
        handed = self._batches - self._started_at
        lead = max(0, taken - handed) if taken is not None else 0
        assert self._order is not None  # a switch in mid-epoch needs the order
        if lead >= len(self._order.remaining()):
            self._finishing = True  # nothing left for new workers to load
            return
        if lead:
            self._old, self._old_left, self.handing_over = old, lead, self._running
        else:
            self._loaders.stop(old)
        self._start(settings, lead=lead)

    def _start(self, settings: Settings, lead: int) -> None:
        batches = None
        if self._order is not None:
            batches = self._order.remaining()[lead:]
        self._iterator = self._loaders.start(settings, batches)
        self._started_at = self._batches + lead
        self._running = without_persistence(settings)
        self._compared = None
        self._tuner.started(settings, lead=lead)

    def _end(self) -> None:
        # Torch stops the workers of an exhausted iterator itself, but persistent ones.
        self._done = True
        self._iterator = None
        self._tuner.epoch_ended(self._batches)

    def close(self) -> None:
        """Leave the epoch before its end: stop its workers."""
        if not self._done:
            if self._old is not None:
                self._stop_old()
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
