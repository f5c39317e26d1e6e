"""What the confirming rounds measured beside the chosen config, as one record: the
decide stage returns it (with its winner) and every :class:`SearchResult` carries it, so
its fields are declared once."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune._noise import LogSpread
from autotune.probe import Measurement


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmation:
    """The default loader and the finalists measured in interleaved rounds, the noise
    between the rounds, and the verdict."""

    baseline: Measurement | None = None
    """The default DataLoader (num_workers=0, the config's batch size), measured alongside:
    its median round; None when it failed in a round."""
    finalists: tuple[Measurement, ...] = ()
    """Every config re-measured in every round before choosing, each with its median
    round's figures, the winner among them."""
    confirmed: bool = True
    """True when the chosen config was measured again in every confirming round; False
    when it was chosen from exploration figures alone (the search did not reach its
    confirming rounds, or every config failed in them)."""
    rounds: int = 0
    """Interleaved confirming rounds (0: a study from before rounds were counted)."""
    noise: float = 0.0
    """The noise measured between the rounds (half the range over the median, the median
    over configs): a config beats the default loader only by more than max(tolerance,
    noise)."""
    rates: tuple[float, ...] = ()
    """The chosen config's samples/s in each round."""
    rates_spread: LogSpread | None = None
    """The spread of samples/s between the rounds, pooled over every config measured in
    all of them, the default included (None: a study from before it was kept; the
    interval then takes the chosen config's own rounds)."""
    speedup_rounds: tuple[float, ...] = ()
    """Chosen / default in each round, both measured side by side."""
    speedup_spread: LogSpread | None = None
    """The spread of the speedups over the default loader between the rounds, pooled over
    every finalist measured in all the rounds it was measured in (None: a study from
    before it was kept; the speedup's interval then takes the chosen config's own
    rounds, which two rounds hardly estimate)."""
    is_default: bool = False
    """No config beat the default DataLoader beyond the noise: it is the recommendation."""
    at_ceiling: float | None = None
    """The highest compute ceiling of the space (samples/s), where the default loader
    already trained within the tolerance of it and the search ended there, nothing
    explored; None otherwise."""

    def confirmation(self) -> dict[str, Any]:
        """This record's fields by name, to carry them into another record of the same
        rounds (``SearchResult(..., **confirmed.confirmation())``)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(Confirmation)}
