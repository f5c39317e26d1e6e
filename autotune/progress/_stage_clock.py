"""Time a search's stages at the boundaries it already announces, with no timing code
in the stages themselves."""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune._stages import Stage
from autotune.probe import Window
from autotune.progress._progress import Progress
from autotune.result import SearchTime
from autotune.settings import Settings
from autotune.study import TrialRecord


class StageClock:
    """A :class:`Progress` that passes every event on to ``inner`` and times each stage
    from its ``phase`` to the next on a monotonic clock, its total from its making.

    A stage announced twice adds both spans to one figure. :meth:`stop` ends the stage
    under way and returns the times; later phases are passed on, untimed.
    """

    def __init__(self, inner: Progress, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self._clock = clock
        self._started = clock()
        self._stage: Stage | None = None
        self._since = self._started
        self._seconds: dict[Stage, float] = {}
        self._stopped: SearchTime | None = None

    def _close(self, now: float) -> None:
        if self._stage is not None:
            self._seconds[self._stage] = self._seconds.get(self._stage, 0.0) + now - self._since
        self._stage = None

    def stop(self, *, continued: bool = False) -> SearchTime:
        """The search's time so far, by stage, the stage under way ended now; the first
        call's answer again on a later one. ``continued``: the search went on with a
        study begun before (see :attr:`SearchTime.continued`)."""
        if self._stopped is None:
            now = self._clock()
            self._close(now)
            self._stopped = SearchTime(
                total_s=now - self._started,
                stages=tuple(self._seconds.items()),
                continued=continued,
            )
        return self._stopped

    # ----------------------------------------------------------------- events
    def phase(self, name: Stage, detail: str) -> None:
        if self._stopped is None:
            now = self._clock()
            self._close(now)
            if name != Stage.DONE:
                self._stage, self._since = name, now
        self.inner.phase(name, detail)

    def plan(self, stage: Stage, trials: int, timeout: float | None, *, later: int = 0) -> None:
        self.inner.plan(stage, trials, timeout, later=later)

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        self.inner.trial_started(number, role, settings)

    def window(self, number: int, window: Window, value: float) -> None:
        self.inner.window(number, window, value)

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        self.inner.trial_finished(record, best)

    def message(self, text: str) -> None:
        self.inner.message(text)
