"""How long a climb may take: a share of the first epoch's batches, or some seconds,
whichever ends first."""

from __future__ import annotations

import dataclasses
import math

DEFAULT_SECONDS = 60.0
"""The seconds a climb may take when the caller sets none."""


@dataclasses.dataclass(kw_only=True)
class Budget:
    """The steps and seconds a climb may spend measuring.

    Only the steps the climb measures count: with an IterableDataset the loader
    cannot change config inside an epoch, and the steps that wait for the epoch's
    end measure nothing.
    """

    batches: int | None
    """The most steps; None: no limit in steps (a dataset of unknown length)."""
    seconds: float
    spent_batches: int = 0
    spent_seconds: float = 0.0

    @classmethod
    def of(cls, epoch_batches: int | None, fraction: float | None, seconds: float) -> Budget:
        """``fraction`` of an epoch's ``epoch_batches`` (at least one), or ``seconds``."""
        batches = None
        if epoch_batches is not None and fraction is not None:
            batches = max(1, math.ceil(fraction * epoch_batches))
        return cls(batches=batches, seconds=seconds)

    def spend(self, seconds: float) -> None:
        """Count one measured step that took ``seconds``."""
        self.spent_batches += 1
        self.spent_seconds += seconds

    @property
    def over(self) -> bool:
        if self.batches is not None and self.spent_batches >= self.batches:
            return True
        return self.spent_seconds >= self.seconds

    def fresh(self) -> Budget:
        """The same budget, unspent (for a climb started again)."""
        return Budget(batches=self.batches, seconds=self.seconds)
