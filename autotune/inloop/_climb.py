"""The hill climb: which loader config to measure next, and whether to keep a move.

Pure functions and one small state machine over measured windows, so the rule is
testable without a DataLoader. The climb starts from one config (the default
loader, or a study's choice), measures it for a few windows, then its neighbours
one at a time; a move is kept only when it beats the current config beyond the
noise, and the climb goes on from there. It ends when no neighbour is better, and
settles on the config it stands on.

Two shortcuts keep a climb inside a few percent of an epoch. The start's windows say
how long each step waits for data and how long the rest of it takes; from those the
climb estimates the workers that would keep the loop fed and measures that config
first (a *jump*), instead of doubling its way there one measured config at a time.
A start that hardly waits has nothing to gain from loading faster and ends the climb
at once; a start that waits most of its steps is judged after one window; a
candidate that is clearly faster or slower than the config it would replace
(:data:`DECISIVE`) is judged after one window too.

"Beyond the noise" is the project's choosing rule (see ``decide._choose``) applied
to a pair: the noise is the larger of the tolerance and the spread measured between
windows; a dearer config (more workers, deeper prefetch, pinned memory) must be
faster by more than that, a cheaper one need only not be slower by more.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from autotune._format import format_rate
from autotune._noise import DEFAULT_TOLERANCE, window_spread
from autotune.decide import cost
from autotune.probe import Window
from autotune.settings import TORCH_PREFETCH, Settings

IDLE_WAIT = 0.03
"""A start without workers whose steps wait less than this share for data ends the
climb: moving all of its loading out of the loop would gain less than the tolerance."""
DATA_BOUND = 0.5
"""A start whose steps wait at least this share for data is judged after one window."""
DECISIVE = 1.5
"""A candidate this many times faster or slower than the config it would replace is
judged after one window."""
HEADROOM = 1.25
"""A jump aims at workers that load this much faster than the loop trains."""
IDLE_HEADROOM = 2.0
"""... and twice as fast when the loads leave the CPU idle: such workers cost no CPU,
while the training time seen in the start's first step (its one-off costs included)
makes the estimate low. Where even the CPUs' worth falls short, such a jump goes to
the most workers at once: on io-bound the first step's training took about 15 times a
steady step's, the estimate landed on 13 of the 16 workers the loop needed, and each
further move restarts every worker."""
CPU_BOUND = 0.5
"""Loading that keeps the loop's thread busy this share of its time is CPU-bound: a jump
then takes no more workers than the CPUs."""
SHORT_PREFETCH = 4
"""The prefetch depth of a jump for CPU-bound loading that even every CPU cannot keep up
with: such workers share the CPUs with the loop, which sends a worker its next batch only
as it takes one, so a worker whose few queued batches are done idles while the loop waits
for a CPU; twice torch's depth keeps it loading, for the memory of the batches queued."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClimbOptions:
    """How the climb measures and where it may go."""

    max_workers: int
    """The most DataLoader workers it tries: above the CPU count, for loading that waits
    on storage or the network rather than on a CPU."""
    cpus: int | None = None
    """The CPUs this process may use: a jump for CPU-bound loading stays within them.
    None: ``max_workers``."""
    windows: int = 3
    """Windows measured per config before it is judged."""
    tolerance: float = DEFAULT_TOLERANCE
    """The least relative difference that counts, however quiet the windows."""
    max_prefetch: int = 8
    pin_memory: bool = False
    """Whether pinned memory may be tried (only when training on CUDA)."""


def noise(current: Sequence[float], candidate: Sequence[float], tolerance: float) -> float:
    """The relative difference two configs' medians must exceed to count."""
    return max(tolerance, window_spread(current), window_spread(candidate))


def keeps(
    candidate: Settings,
    candidate_rates: Sequence[float],
    current: Settings,
    current_rates: Sequence[float],
    tolerance: float,
) -> bool:
    """Whether the climb moves from ``current`` to ``candidate``.

    A dearer candidate must beat the current config beyond the noise; a cheaper one
    (``decide._choose.cost``) is kept unless it is slower beyond the noise.
    """
    margin = noise(current_rates, candidate_rates, tolerance)
    new, old = statistics.median(candidate_rates), statistics.median(current_rates)
    # The climb keeps the user's batch: both configs have it.
    if cost(candidate, current.batch_size) < cost(current, current.batch_size):
        return new >= old * (1.0 - margin)
    return new > old * (1.0 + margin)


def neighbours(settings: Settings, options: ClimbOptions) -> list[Settings]:
    """The configs one move away, the likeliest gains first.

    More workers (doubling, then one more), deeper prefetch (doubling), pinned memory
    toggled (on CUDA only), then fewer workers (halving). From no workers, two workers
    come before one: where the loop is all loading, one worker only moves the loading
    out of the loop, as slow as before, and the climb would stop there. Persistence
    is not a move: it changes nothing within an epoch (see :func:`wants_persistent`).
    """
    workers = settings.num_workers
    # Doubling past the most tries the most itself (a jump lands anywhere below it).
    doubled = min(2 * workers, max(options.max_workers, workers))
    more = (2, 1) if workers == 0 else (doubled, workers + 1)
    found = [
        *(_workers(settings, w) for w in more),
        _prefetch(settings, 2 * (settings.prefetch_factor or TORCH_PREFETCH), options.max_prefetch),
        dataclasses.replace(settings, pin_memory=not settings.pin_memory)
        if options.pin_memory
        else None,
        _workers(settings, workers // 2) if workers > 0 else None,
    ]
    unique: dict[str, Settings] = {}
    for option in found:
        if option is None or option == settings or option.num_workers > options.max_workers:
            continue
        unique.setdefault(option.key(), option)
    return list(unique.values())


def _workers(settings: Settings, workers: int) -> Settings:
    if workers == 0:
        return dataclasses.replace(
            settings, num_workers=0, prefetch_factor=None, persistent_workers=False
        )
    # torch's default depth, written out: one config, one key. Workers started here cap
    # their native pools as a search's configs do; workers already running keep theirs.
    return dataclasses.replace(
        settings,
        num_workers=workers,
        prefetch_factor=settings.prefetch_factor or TORCH_PREFETCH,
        worker_threads=settings.started_worker_threads(),
    )


def _prefetch(settings: Settings, depth: int, most: int) -> Settings | None:
    if settings.num_workers == 0 or depth > most:
        return None
    return dataclasses.replace(settings, prefetch_factor=depth)


def wait_share(windows: Sequence[Window]) -> float:
    """The share of the windows' time the loop spent waiting in ``next()``."""
    seconds = sum(w.seconds for w in windows)
    return sum(w.wait_seconds for w in windows) / seconds if seconds > 0 else 0.0


def jump(
    settings: Settings,
    windows: Sequence[Window],
    options: ClimbOptions,
    cpu_share: float | None = None,
) -> Settings | None:
    """The config with the workers that would keep the loop fed, estimated from the
    windows of ``settings``; None when that is no further than its first neighbour.

    A step is the wait for its batch and the rest (the training). Without workers the
    wait is the whole load of a batch; with N workers that cannot keep up, each takes N
    steps to load one. The loop is fed when the workers load :data:`HEADROOM` times
    faster than it trains. ``cpu_share``: the CPU time the loop's thread spent inside
    the loads over their wall time (known without workers only); CPU-bound loading gets
    no more workers than the CPUs, loading that leaves the CPU idle gets twice the
    estimate (:data:`IDLE_HEADROOM`), and the most workers when that is more than the
    CPUs; when even the CPUs' worth falls short, the jump also queues deeper
    (:data:`SHORT_PREFETCH`), and is made even where the workers are those of the first
    neighbour.
    """
    steps = sum(w.steps for w in windows)
    seconds = sum(w.seconds for w in windows)
    waited = sum(w.wait_seconds for w in windows)
    if steps == 0 or seconds <= 0 or waited <= 0:
        return None
    step = seconds / steps
    train = max(step - waited / steps, 1e-3 * step)
    workers = settings.num_workers
    load = waited / steps if workers == 0 else workers * step
    cpus = options.cpus if options.cpus is not None else options.max_workers
    waits_on_cpu = cpu_share is None or cpu_share >= CPU_BOUND
    needed = math.ceil((HEADROOM if waits_on_cpu else IDLE_HEADROOM) * load / train)
    most = min(options.max_workers, max(cpus, workers)) if waits_on_cpu else options.max_workers
    if not waits_on_cpu and needed > cpus:
        needed = most
    short = waits_on_cpu and needed > most  # even every CPU cannot keep the loop fed
    needed = min(needed, most)
    if short:
        depth = max(SHORT_PREFETCH, settings.prefetch_factor or 0)
        deeper = _prefetch(_workers(settings, needed), depth, options.max_prefetch)
        if deeper is not None and deeper != settings:
            return deeper
    first = 2 if workers == 0 else 2 * workers
    if needed <= first:
        return None
    return _workers(settings, needed)


def wants_persistent(startup_s: float | None, epoch_seconds: float | None) -> bool:
    """Whether keeping workers between epochs is worth their memory: when starting them
    again would cost at least 1% of an epoch."""
    if startup_s is None or epoch_seconds is None or epoch_seconds <= 0:
        return False
    return startup_s >= 0.01 * epoch_seconds


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The climb's judgement of one candidate against the config it stood on."""

    candidate: Settings
    current: Settings
    candidate_rate: float
    current_rate: float
    noise: float
    kept: bool

    def describe(self) -> str:
        verb = "kept" if self.kept else "rejected"
        return (
            f"{verb} {self.candidate.describe()}: {format_rate(self.candidate_rate)} samples/s "
            f"against {format_rate(self.current_rate)} (noise ±{self.noise:.0%})"
        )


class Climb:
    """One climb from ``start``: feed it the windows of the config it is ``trying``.

    Args:
        start: the config it starts on (measured first).
        options: how it measures and where it may go.
    """

    def __init__(self, start: Settings, options: ClimbOptions) -> None:
        self.options = options
        self.current = start
        """The config the climb stands on: the best kept so far."""
        self.trying = start
        """The config whose windows it wants next."""
        self.done = False
        self.judged = False
        """Whether a move has been judged (kept or not)."""
        self.windows: dict[str, list[Window]] = {start.key(): []}
        self.configs: dict[str, Settings] = {start.key(): start}
        self._queue: list[Settings] = []

    def rates(self, settings: Settings) -> list[float]:
        """The window rates measured of ``settings`` in this climb."""
        return [w.samples_per_s for w in self.windows.get(settings.key(), [])]

    def add(self, window: Window, cpu_share: float | None = None) -> Verdict | None:
        """Count a window of :attr:`trying`; returns the verdict once it is judged.

        Args:
            window: the window.
            cpu_share: of the loads so far without workers, the loop thread's CPU time
                over their wall time (see :func:`jump`); None when unknown.
        """
        if self.done:
            return None
        measured = self.windows[self.trying.key()]
        measured.append(window)
        if not self._judged_now(measured):
            return None
        verdict = None
        if self.trying != self.current:
            verdict = self._judge()
        elif self._idle(measured):
            self.finish()
            return None
        else:
            leap = jump(self.current, measured, self.options, cpu_share)
            self._queue = ([leap] if leap is not None else []) + self._untried(self.current)
        self._next()
        return verdict

    def glance(self, warm_up: Window, cpu_share: float | None = None) -> None:
        """A first look at the start's warm-up: when even it waits most of its time for
        data, the start is judged on it and the climb jumps at once. The warm-up's
        one-off costs (the first backward's allocations) lengthen the training, not the
        wait, so they can only make a loop look less data-bound than it is."""
        start = self.trying == self.current and not self.windows[self.current.key()]
        if self.done or not start or wait_share([warm_up]) < DATA_BOUND:
            return
        self.add(warm_up, cpu_share)

    def _judged_now(self, measured: Sequence[Window]) -> bool:
        if len(measured) >= self.options.windows:
            return True
        if self.trying == self.current:  # the start
            return self._idle(measured) or wait_share(measured) >= DATA_BOUND
        new = statistics.median(w.samples_per_s for w in measured)
        old = statistics.median(self.rates(self.current))
        return new > DECISIVE * old or DECISIVE * new < old

    def _idle(self, measured: Sequence[Window]) -> bool:
        """The start has no workers and hardly waits: no loader setting can gain."""
        return self.current.num_workers == 0 and wait_share(measured) < IDLE_WAIT

    def finish(self) -> None:
        """The budget is spent: stand on the best config kept so far."""
        self.done = True
        self.trying = self.current

    def _judge(self) -> Verdict:
        candidate, current = self.trying, self.current
        new, old = self.rates(candidate), self.rates(current)
        kept = keeps(candidate, new, current, old, self.options.tolerance)
        self.judged = True
        verdict = Verdict(
            candidate=candidate,
            current=current,
            candidate_rate=statistics.median(new),
            current_rate=statistics.median(old),
            noise=noise(old, new, self.options.tolerance),
            kept=kept,
        )
        if kept:
            self.current = candidate
            self._queue = self._untried(candidate)
        return verdict

    def _untried(self, settings: Settings) -> list[Settings]:
        return [s for s in neighbours(settings, self.options) if s.key() not in self.windows]

    def _next(self) -> None:
        queue = [s for s in self._queue if s.key() not in self.windows]
        unique = {s.key(): s for s in queue}
        self._queue = list(unique.values())
        self._take()

    def _take(self) -> None:
        if not self._queue:
            self.finish()
            return
        self.trying = self._queue.pop(0)
        self.windows[self.trying.key()] = []
        self.configs[self.trying.key()] = self.trying

    def measured(self) -> list[tuple[Settings, list[Window]]]:
        """Every config measured for at least one window, in the order tried."""
        return [(self.configs[key], ws) for key, ws in self.windows.items() if ws]


def without_persistence(settings: Settings) -> Settings:
    """``settings`` with persistent workers off: the config as the climb sees it.

    Persistence changes nothing within an epoch, so two configs that differ only in
    it load the same way, and the loader does not switch between them mid-epoch.
    """
    return dataclasses.replace(settings, persistent_workers=False)
