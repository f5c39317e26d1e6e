"""The measuring loop every probe runs: start-up, warm-up, then windows of real steps.

One loop serves a probe alone and each rank of a DDP probe. What differs is the
pace, which decides when the warm-up and each window end:

- :class:`SoloPace`, one process: the clock ends them (``warmup_seconds``,
  ``window_seconds``), and a stop (the pruner's verdict) is obeyed at the next step;
- ``AgreedPace`` (in :mod:`autotune.probe._ddp`), DDP ranks: every rank must take
  the same steps, or one waits forever in an all-reduce, so the ranks agree on the
  steps of each window at its edges, and add up their figures there.

How a window is timed, the same for every AMP mode:

- its time is wall time between two synchronised edges: the device is synchronised
  at the warm-up's end and at every window's end, so the device work a window
  queued is inside it, whether the host ran ahead of the device or not;
- no sync is added inside a window for one mode and not another. fp16's GradScaler
  waits for the device in every step (``scaler.step`` reads its inf check) and
  bf16 does not; that wait is what fp16 costs in training too, so it stays in the
  step's time, counted neither as waiting for data nor as copying;
- waiting for data is the host's time blocked in ``next_batch`` alone. Where the host
  runs ahead of the device (bf16, AMP off), part of that wait overlaps queued device
  work: the device idles at most that share of the window;
- the copy to the device is timed apart by the steps' ``timer``: CUDA events on CUDA
  (the copy's own device time, without a sync), a synchronize on either side of it on
  another accelerator (a sync per step, for every mode alike), the host's clock on
  the CPU, where it is a no-op. A copy queued without blocking (pinned memory) may
  run while the host waits for the next batch: that part is counted in the wait
  alone, so the wait and the copy never add up past the window;
- on CUDA the events also time the device's busy span of each batch, from its copy
  to the end of its steps (``Window.device_seconds``).
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

from autotune.probe._protocol import Window
from autotune.probe._steady import ends_steady
from autotune.probe._timing import CopyTimer, Span, synchronize

Send = Callable[[tuple[str, Any]], None]
"""Sends one event of the probe protocol (see :mod:`autotune.probe._child`)."""

BEAT_SECONDS = 1.0
"""Most seconds between two "alive" events of a probe that is still stepping."""


def beat_seconds(stall_timeout: float) -> float:
    """Seconds between beats for a search that kills a probe silent for ``stall_timeout``:
    :data:`BEAT_SECONDS`, or a quarter of a shorter timeout."""
    return min(BEAT_SECONDS, stall_timeout / 4) if stall_timeout > 0 else BEAT_SECONDS


class Heartbeat:
    """Tells the search the probe is alive, at most once every ``every`` seconds.

    The search kills a probe silent for its stall timeout as a hang, and a warm-up of
    ``num_workers x prefetch_factor`` slow steps, or a window of a whole turn of them,
    can last longer than that while every step ends: a beat after each step keeps the
    stall clock counting from the last step, so only a step or a batch that never ends
    is killed.
    """

    def __init__(
        self,
        send: Send,
        every: float = BEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every <= 0:
            raise ValueError(f"every is {every}; expected > 0 (seconds between two beats)")
        self.send = send
        self.every = every
        self.clock = clock
        self.last = clock()

    def __call__(self) -> None:
        """After a step: send "alive" if ``every`` seconds have passed since the last."""
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.send(("alive", None))


class Warmth(enum.Enum):
    """Where the warm-up stands after a round of steps."""

    COLD = "cold"
    WARM = "warm"
    STOPPED = "stopped"


@dataclasses.dataclass
class Tally:
    """The counts of one window under way."""

    began: float
    wait_seconds: float = 0.0
    copy_seconds: float = 0.0
    device_seconds: float | None = None
    samples: int = 0
    fresh: int = 0
    steps: int = 0
    batches: int = 0
    waits: list[Span] = dataclasses.field(default_factory=list)
    """When the host waited for each batch, on its clock: the copies' time inside these
    is not counted again as copying."""

    def add(self, n: int, echo: int, wait_seconds: float) -> None:
        """One batch of ``n`` samples, waited for ``wait_seconds``, trained ``echo`` times."""
        self.wait_seconds += wait_seconds
        self.samples += n * echo
        self.steps += echo
        self.fresh += n
        self.batches += 1

    def window(self, index: int, seconds: float) -> Window:
        return Window(
            index=index,
            seconds=seconds,
            samples=self.samples,
            fresh=self.fresh,
            steps=self.steps,
            wait_seconds=self.wait_seconds,
            copy_seconds=self.copy_seconds,
            device_seconds=self.device_seconds,
        )


class Pace(Protocol):
    """When the warm-up and the windows of a measuring loop end, and where figures go."""

    def ready(self, startup_s: float) -> None:
        """The first batch arrived after ``startup_s``."""

    def warm_round(self) -> int:
        """Steps to train before asking :meth:`warmed` again."""

    def warmed(self, steps: int, began: float) -> Warmth:
        """After ``steps`` warm-up steps since ``began`` (``time.perf_counter``): warm,
        cold, or stopped."""

    def stopped(self) -> bool:
        """Abandon the window under way (checked after every step)."""

    def window_full(self, tally: Tally, elapsed: float) -> bool:
        """The window under way has its steps."""

    def close(self, index: int, tally: Tally, seconds: float) -> bool:
        """Report the window just measured; False ends the loop."""


class SoloPace:
    """One probe process alone: the clock ends the warm-up and the windows; a stop from
    the search is obeyed at the next step, abandoning the window under way.

    Workers that share few CPUs finish their batches together, so batches arrive in
    bursts a turn apart (``turn``: the workers take batches in turn, ``num_workers`` to
    a turn), and the batches the workers load while starting (``queued``) wait for the
    training at once. So the warm-up lasts ``warmup_seconds`` and trains through more
    than ``queued`` batches, and a window ends after ``window_seconds`` on a whole turn:
    a short span that holds one burst more or less than its share reads a loader of
    many workers on few CPUs several times too fast or too slow. With ``steady``, the
    windows end once they agree within that share (:func:`ends_steady`).
    """

    def __init__(
        self,
        *,
        warmup_seconds: float,
        window_seconds: float,
        send: Send,
        stop: threading.Event,
        queued: int = 0,
        turn: int = 1,
        steady: float | None = None,
    ) -> None:
        if turn < 1:
            raise ValueError(
                f"turn is {turn}; expected >= 1 (batches the workers hand over in turn)"
            )
        self.warmup_seconds = warmup_seconds
        self.window_seconds = window_seconds
        self.send = send
        self.stop = stop
        self.queued = queued
        self.turn = turn
        self.steady = steady
        self.windows: list[Window] = []

    def ready(self, startup_s: float) -> None:
        self.send(("ready", {"startup_s": startup_s}))

    def warm_round(self) -> int:
        return 1

    def warmed(self, steps: int, began: float) -> Warmth:
        if self.stop.is_set():
            return Warmth.STOPPED
        warm = time.perf_counter() - began >= self.warmup_seconds and steps > self.queued
        return Warmth.WARM if warm else Warmth.COLD

    def stopped(self) -> bool:
        return self.stop.is_set()

    def window_full(self, tally: Tally, elapsed: float) -> bool:
        return elapsed >= self.window_seconds and tally.batches % self.turn == 0

    def close(self, index: int, tally: Tally, seconds: float) -> bool:
        window = tally.window(index, seconds)
        self.send(("window", window))
        self.windows.append(window)
        return not ends_steady(self.windows, self.steady)


@dataclasses.dataclass(frozen=True)
class Steps:
    """What one step of the loop does: a batch from the loader, its copy to the device,
    then ``echo`` training steps on it; each timed apart in a window."""

    next_batch: Callable[[], tuple[Any, int]]
    """The next batch from the loader, on the host, and its samples (the time blocked
    here is waiting for data)."""
    copy: Callable[[Any], Any]
    """The batch on the device (timed by ``timer``)."""
    work: Callable[[Any], None]
    """One training step on a batch on the device."""
    echo: int
    """Times each batch is trained on (data echoing)."""
    timer: CopyTimer
    """Times the copies of a window: :func:`autotune.probe._timing.copy_timer` of the
    device the batches go to."""
    beat: Callable[[], None] = lambda: None
    """Called after every step, warm-up included (a :class:`Heartbeat`)."""

    def fetch(self) -> Any:
        """The next batch on the device, untimed (start-up and warm-up)."""
        batch, _samples = self.next_batch()
        return self.copy(batch)

    def measured(self, tally: Tally) -> None:
        """One batch fetched, copied and trained on, counted in ``tally``."""
        began = time.perf_counter()
        batch, samples = self.next_batch()
        ended = time.perf_counter()
        tally.waits.append((began, ended))
        batch = self.timer.copy(self.copy, batch)
        for _ in range(self.echo):
            self.work(batch)
        self.timer.stepped()
        tally.add(samples, self.echo, ended - began)
        self.beat()


def measure(pace: Pace, steps: Steps, *, max_windows: int, device: torch.device) -> None:
    """Start-up, warm-up, then up to ``max_windows`` windows of ``steps``, each reported
    to ``pace`` as it ends (timed as the module's docstring says).

    Args:
        pace: when the warm-up and each window end, and where the figures go.
        steps: what one step does; its ``next_batch`` counts samples from the loader's
            sampler (see :class:`autotune.probe._build.BatchStream`).
        max_windows: windows to measure unless stopped.
        device: synchronised at the warm-up's end and at every window edge.
    """
    clock = time.perf_counter
    start = clock()
    batch = steps.fetch()
    pace.ready(clock() - start)
    if not _warm_up(pace, batch, steps):
        return
    synchronize(device)
    for index in range(max_windows):
        if pace.stopped():
            return
        measured = one_window(steps, device, full=pace.window_full, stopped=pace.stopped)
        if measured is None:
            return
        if not pace.close(index, *measured):
            return


def one_window(
    steps: Steps,
    device: torch.device,
    *,
    full: Callable[[Tally, float], bool],
    stopped: Callable[[], bool],
) -> tuple[Tally, float] | None:
    """Measure steps until ``full(tally, elapsed)`` says the window has them, the device
    synchronised at its end (the caller synchronised it at its start); the tally and the
    window's seconds, or None when ``stopped()`` abandoned it."""
    clock = time.perf_counter
    tally = Tally(began=clock())
    steps.timer.begin()
    while True:
        steps.measured(tally)
        if stopped():
            return None
        if full(tally, clock() - tally.began):
            break
    synchronize(device)
    seconds = clock() - tally.began
    timed = steps.timer.take(tally.waits)
    tally.copy_seconds = timed.copy_seconds
    tally.device_seconds = timed.device_seconds
    return tally, seconds


def _warm_up(pace: Pace, batch: Any, steps: Steps) -> bool:
    """Train unmeasured rounds of steps until the pace says warm; False when stopped."""
    began = time.perf_counter()
    trained = 0
    while True:
        for _ in range(pace.warm_round()):
            if trained:
                batch = steps.fetch()
            for _ in range(steps.echo):
                steps.work(batch)
            trained += 1
            steps.beat()
        warmth = pace.warmed(trained, began)
        if warmth is not Warmth.COLD:
            return warmth is Warmth.WARM
