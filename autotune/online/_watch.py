"""After settling: notice when throughput falls and stays down, to climb again.

A loader's best config can change during training: the dataset's items grow, the
machine gets busier, the model's step gets shorter. One slow window is noise; a
run of them is a change.
"""

from __future__ import annotations

import statistics


class Watch:
    """Compares each window with the settled figure and says when to climb again.

    The settled figure is the median of the first ``reference`` windows after
    settling, measured in the settled state itself.

    Args:
        ratio: a window below ``ratio`` x the settled figure counts as down.
        sustained: this many down windows in a row mean a sustained drop.
        reference: windows that make the settled figure.
    """

    def __init__(self, *, ratio: float = 0.7, sustained: int = 5, reference: int = 3) -> None:
        self.ratio = ratio
        self.sustained = sustained
        self._reference_rates: list[float] = []
        self._reference = reference
        self.settled: float | None = None
        """The settled figure (samples/s); None until measured."""
        self._down = 0

    def add(self, rate: float) -> bool:
        """Count one window's samples/s; True when throughput has dropped for long enough."""
        if self.settled is None:
            self._reference_rates.append(rate)
            if len(self._reference_rates) >= self._reference:
                self.settled = statistics.median(self._reference_rates)
            return False
        self._down = self._down + 1 if rate < self.ratio * self.settled else 0
        return self._down >= self.sustained
