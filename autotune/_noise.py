"""How much a throughput moves between measurements of one config: one family of spreads,
each variant named for what it is taken over.

Every variant is relative (or taken on logarithms), so it reads the same at 10 samples/s
and at 10,000: a throughput varies by a factor, not by an amount.

- :func:`window_spread`: the windows of one run (a probe, or one config online), many and
  alike, so their standard deviation over their mean;
- :func:`half_range`: a config's figures over a few confirming rounds, so half their
  range over their median, which one odd round cannot drag as it drags a mean: how far
  a round may stray from the median either way (the confirmation's and the plain-loop
  checker's spread);
- :func:`relative_range`: the same rounds' whole range over their median, twice the
  half range: how far apart the rounds read end to end (the suite's round spread);
- :func:`difference_error`: the standard error of the relative difference of two runs'
  throughputs, from each run's window spread and window count;
- :func:`pooled_log_spread`: the standard deviation of the logarithms of several
  configs' rounds, pooled over the configs measured in the same rounds, so three
  rounds that happen to agree do not read as no noise.

Below every spread lies :data:`DEFAULT_TOLERANCE`, the least relative difference that
counts however quiet the measurements: the one default for the search, the online climb
and the benchmarks that judge them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

DEFAULT_TOLERANCE = 0.03
"""Configs within this fraction of each other count as equally fast, however quiet their
figures: the default of the search's and the online climb's ``tolerance``, and the
tolerance of a saved result that does not record its own."""


def window_spread(rates: Sequence[float]) -> float:
    """The standard deviation of ``rates`` over their mean; 0.0 for fewer than two rates
    or a mean that is not positive."""
    if len(rates) < 2 or statistics.fmean(rates) <= 0:
        return 0.0
    return statistics.stdev(rates) / statistics.fmean(rates)


def relative_range(rates: Sequence[float]) -> float | None:
    """The range of ``rates`` over their median; None for fewer than two rates or a
    median that is not positive."""
    if len(rates) < 2:
        return None
    middle = statistics.median(rates)
    if middle <= 0:
        return None
    return (max(rates) - min(rates)) / middle


def half_range(rates: Sequence[float]) -> float | None:
    """Half the range of ``rates`` over their median (half :func:`relative_range`); None
    for fewer than two rates or a median that is not positive."""
    whole = relative_range(rates)
    return None if whole is None else whole / 2


def difference_error(*runs: tuple[float, int]) -> float:
    """The relative standard error of the difference of the runs' throughputs, each run
    given as (its :func:`window_spread`, its window count; a count below 1 counts as 1)."""
    return math.sqrt(sum(spread**2 / max(1, count) for spread, count in runs))


@dataclasses.dataclass(frozen=True)
class LogSpread:
    """A spread estimated on the logarithms of figures: their standard deviation and the
    degrees of freedom behind it."""

    sd: float
    degrees: int

    def to_dict(self) -> dict[str, float | int]:
        return {"sd": self.sd, "degrees": self.degrees}

    @classmethod
    def from_dict(cls, data: Mapping[str, float | int]) -> LogSpread:
        return cls(sd=float(data["sd"]), degrees=int(data["degrees"]))


def pooled_log_spread(groups: Sequence[Sequence[float]]) -> LogSpread | None:
    """The spread of ``groups`` of figures (each group one config's rounds) pooled over
    the groups: the squared deviations of each group's logarithms from their own mean,
    summed, over the sum of each group's count less one.

    Groups of fewer than 2 figures, or with a figure that is not positive, add nothing;
    None when no group adds a degree of freedom.
    """
    squares = 0.0
    degrees = 0
    for group in groups:
        if len(group) < 2 or any(v <= 0 for v in group):
            continue
        logs = [math.log(v) for v in group]
        centre = statistics.fmean(logs)
        squares += sum((x - centre) ** 2 for x in logs)
        degrees += len(logs) - 1
    if degrees == 0:
        return None
    return LogSpread(sd=math.sqrt(squares / degrees), degrees=degrees)
