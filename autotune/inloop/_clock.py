"""Windows of the user's own steps, timed from inside the loader.

The loader sees two instants per step: when the user asks for the next batch and
when it gets it. The time between two successive hand-overs is one whole step of
the user's loop (its forward, backward and optimizer step, plus the wait for the
batch); the time inside ``next()`` is the wait alone. A window adds whole steps up
until it is long enough, and becomes a :class:`~autotune.probe.Window`, the record
the probes use too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune.probe import Window

MIN_STEPS = 2
"""A window holds at least this many steps, however short ``window_seconds`` is."""
WARM_UP = -1
"""The index of a warm-up window: returned for a first look, never to be judged on."""


class StepClock:
    """Times the steps of one running DataLoader iterator and closes windows.

    After each (re)start the first batch is start-up (workers starting, their first
    batches), timed on its own, and the steps after it are warm-up, returned as a window
    of index :data:`WARM_UP` for a first look but not to be judged on: the batches the
    workers prefetched while starting come all at once, faster than the loader's steady
    pace, so the warm-up lasts as many steps as were prefetched (one at least, without
    workers: the first step after start-up). A config is judged on its steady pace, as
    the probes judge it.

    Args:
        window_seconds: a window ends at the first step boundary after this long.
        min_steps: and holds at least this many steps.
        now: the clock, in seconds (a fake one in tests).
    """

    def __init__(
        self,
        window_seconds: float,
        min_steps: int = MIN_STEPS,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.now = now
        self.window_seconds = window_seconds
        self.min_steps = min_steps
        self.startup_s: float | None = None
        """The last start-up: from asking the new iterator for a batch to getting it."""
        self._index = 0
        self._last: float | None = None
        self._warm = False
        self._warmup_steps = 0
        self._seconds = self._wait = 0.0
        self._samples = self._steps = 0
        self._startup_samples = 0
        self._looked = False
        self._lead = 0
        self._cold = True
        """Whether the running iterator started cold (not handed over to)."""
        self._handed: float | None = None
        """When the last batch was handed over, whichever iterator it came from."""

    def restart(self, prefetched: int = 0, lead: int = 0) -> None:
        """A new iterator, or a new epoch: the next batch is start-up, then warm-up.

        Args:
            prefetched: batches the workers load ahead (workers x prefetch factor); the
                warm-up lasts at least this many steps.
            lead: batches the old iterator still hands over first (a hand-over): not
                the new one's, so neither start-up nor warm-up nor window.
        """
        self._last = None
        self._warm = False
        self._looked = False
        self._warmup_steps = prefetched
        self._lead = lead
        self._cold = lead == 0
        self._clear()

    def _clear(self) -> None:
        self._seconds = self._wait = 0.0
        self._samples = self._steps = 0

    @property
    def starting(self) -> bool:
        """Whether the next batch is the start-up of a new iterator."""
        return self._last is None and not self._lead

    @property
    def starting_cold(self) -> bool:
        """Whether the next batch is the start-up of an iterator started cold: its
        start-up then shows whole (a hand-over hides it behind the old one's batches)."""
        return self.starting and self._cold

    @property
    def leading(self) -> bool:
        """Whether the next batch comes from the iterator being handed over from."""
        return self._lead > 0

    def fetched(self, asked: float, samples: int) -> tuple[float, Window | None]:
        """Count one batch handed over.

        Args:
            asked: when the user asked for it (:attr:`now` before ``next()``).
            samples: the samples in it.

        Returns:
            The seconds this step took (start-up for the first batch after a restart),
            and the window it closed, if any (the warm-up's has index :data:`WARM_UP`).
        """
        got = self.now()
        previous, self._handed = self._handed, got
        if self._lead:
            self._lead -= 1
            return got - (previous if previous is not None else asked), None
        if self._last is None:
            self._last = got
            self.startup_s = got - asked
            self._startup_samples = samples
            return got - asked, None
        step = got - self._last
        self._last = got
        self._seconds += step
        self._wait += got - asked
        self._samples += samples
        self._steps += 1
        if not self._warm:
            # The warm-up drains what the workers loaded while starting: as many steps
            # as they prefetch (one at least), however short.
            if self._steps < max(1, self._warmup_steps):
                return step, None
            return step, self._close()
        if self._steps < self.min_steps or self._seconds < self.window_seconds:
            return step, None
        return step, self._close()

    def first_look(self, asked: float) -> Window | None:
        """As the loop asks for its first batch after a start-up: that start-up's load and
        the time the loop then trained on its batch, as a one-step warm-up window (index
        :data:`WARM_UP`); None at any other time, and when asked again.

        Only a loader without workers loads its start-up batch as it loads every batch
        (in the loop's own thread); with workers, start-up is mostly their starting."""
        if self._last is None or self._warm or self._steps or self._looked:
            return None
        self._looked = True
        load = self.startup_s or 0.0
        return Window(
            index=WARM_UP,
            seconds=load + max(0.0, asked - self._last),
            samples=self._startup_samples,
            fresh=self._startup_samples,
            steps=1,
            wait_seconds=load,
        )

    def _close(self) -> Window:
        window = Window(
            index=self._index if self._warm else WARM_UP,
            seconds=self._seconds,
            samples=self._samples,
            fresh=self._samples,
            steps=self._steps,
            wait_seconds=min(self._wait, self._seconds),
        )
        self._clear()
        if not self._warm:
            self._warm = True
            return window
        self._index += 1
        return window
