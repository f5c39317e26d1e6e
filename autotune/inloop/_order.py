"""An epoch's batches, drawn once, and the ones not yet handed to the user.

The online loader changes DataLoaders in the middle of an epoch. A sampler drawn
again would give another order, so the epoch's order is drawn once, up front, and
every DataLoader of the epoch reads the batches from the first one the user has not
had yet: a switch neither drops nor repeats a sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import BatchSampler, Sampler


class RemainingBatches(Sampler[list[int]]):
    """The ``batch_sampler`` of one DataLoader: the batches it is to load, in order.

    Mutable on purpose: a DataLoader with persistent workers keeps its batch sampler
    for life (torch forbids setting it again) and iterates it anew each epoch, so the
    next epoch's batches are put into this same object.

    Its iteration can be cut (:meth:`cut`): the DataLoader then hands over the batches
    it has already sent to its workers and ends, which lets a switch use what the old
    workers prefetched instead of throwing it away.
    """

    def __init__(self, batches: Sequence[list[int]] = ()) -> None:
        self.batches: Sequence[list[int]] = batches
        self._current: _Cuttable | None = None

    def __iter__(self) -> Iterator[list[int]]:
        # A snapshot: the batches of this iteration, whatever is assigned later.
        self._current = _Cuttable(list(self.batches))
        return self._current

    def __len__(self) -> int:
        return len(self.batches)

    def cut(self) -> int:
        """End the current iteration where it stands; returns how many batches the
        DataLoader has taken from it (handed over, or sent to its workers)."""
        if self._current is None:
            return 0
        return self._current.cut()


class _Cuttable(Iterator[list[int]]):
    """One iteration over a list of batches that can be ended early."""

    def __init__(self, batches: list[list[int]]) -> None:
        self._batches = batches
        self.taken = 0
        self._cut = False

    def __next__(self) -> list[int]:
        if self._cut or self.taken >= len(self._batches):
            raise StopIteration
        batch = self._batches[self.taken]
        self.taken += 1
        return batch

    def cut(self) -> int:
        self._cut = True
        return self.taken


class EpochOrder:
    """The batches of one epoch, and how many of them the user has had.

    Args:
        batches: the epoch's batches of dataset indices, in the order they are served.
    """

    def __init__(self, batches: Sequence[list[int]]) -> None:
        self._batches = list(batches)
        self.handed = 0
        """Batches handed to the user so far this epoch."""

    @classmethod
    def draw(cls, sampler: Iterable[int], batch_size: int, drop_last: bool) -> EpochOrder:
        """Draw the epoch's order from ``sampler``, batched as a DataLoader would batch it."""
        return cls(list(BatchSampler(sampler, batch_size, drop_last)))

    def __len__(self) -> int:
        return len(self._batches)

    def remaining(self) -> list[list[int]]:
        """The batches not yet handed to the user, in order."""
        return self._batches[self.handed :]

    def hand(self) -> list[int]:
        """Count the next batch as handed to the user; returns its indices.

        Raises:
            IndexError: every batch of the epoch has been handed.
        """
        batch = self._batches[self.handed]
        self.handed += 1
        return batch


def epoch_length(dataset: Any, sampler: Any, batch_size: int, drop_last: bool) -> int | None:
    """Batches per epoch, as ``len(DataLoader)`` counts them; None without a length."""
    try:
        items = len(sampler if sampler is not None else dataset)
    except TypeError:  # an IterableDataset without __len__
        return None
    return items // batch_size if drop_last else -(-items // batch_size)
