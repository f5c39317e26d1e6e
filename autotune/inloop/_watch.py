"""After settling: notice when throughput falls and stays down, to climb again.

A loader's best config can change during training: the dataset's items grow, the
machine gets busier, the model's step gets shorter. One slow window is noise; a
run of them lasting many seconds is a change worth a climb's cost.
"""

from __future__ import annotations

import statistics


class Watch:
    """Compares each window with the settled figure and says when to climb again.

    Args:
        settled: the settled figure (samples/s): what the climb measured of the config
            it settled on. None: the median of the first ``reference`` windows after
            settling.
        ratio: a window below ``ratio`` x the settled figure counts as down.
        sustained: this many down windows in a row, lasting ``seconds`` or more, mean
            a sustained drop.
        seconds: the least time the down windows must last together.
        reference: windows that make the settled figure when none is given.
    """

    def __init__(
        self,
        *,
        settled: float | None = None,
        ratio: float = 0.7,
        sustained: int = 5,
        seconds: float = 0.0,
        reference: int = 3,
    ) -> None:
        self.ratio = ratio
        self.sustained = sustained
        self.seconds = seconds
        self._reference_rates: list[float] = []
        self._reference = reference
        self.settled = settled
        """The settled figure (samples/s); None until measured."""
        self._down = 0
        self._down_seconds = 0.0

    def add(self, rate: float, seconds: float = 0.0) -> bool:
        """Count one window (its samples/s, its length); True when throughput has been
        down for long enough."""
        if self.settled is None:
            self._reference_rates.append(rate)
            if len(self._reference_rates) >= self._reference:
                self.settled = statistics.median(self._reference_rates)
            return False
        if rate < self.ratio * self.settled:
            self._down += 1
            self._down_seconds += seconds
        else:
            self._down, self._down_seconds = 0, 0.0
        return self._down >= self.sustained and self._down_seconds >= self.seconds
