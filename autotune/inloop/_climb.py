"""The hill climb: which loader config to measure next, and whether to keep a move.

Pure functions and one small state machine over measured windows, so the rule is
testable without a DataLoader. The climb starts from one config (the default
loader, or a study's choice), measures it for a few windows, then its neighbours
one at a time; a move is kept only when it beats the current config beyond the
noise, and the climb goes on from there. It ends when no neighbour is better, and
settles on the config it stands on.

"Beyond the noise" is the project's choosing rule (see ``decide._choose``) applied
to a pair: the noise is the larger of the tolerance and the spread measured between
windows; a dearer config (more workers, deeper prefetch, pinned memory) must be
faster by more than that, a cheaper one need only not be slower by more.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from autotune._format import format_rate
from autotune.decide._choose import cost
from autotune.probe import Window
from autotune.settings._settings import Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClimbOptions:
    """How the climb measures and where it may go."""

    max_workers: int
    """The most DataLoader workers it tries (this process's share of the CPUs)."""
    windows: int = 3
    """Windows measured per config before it is judged."""
    tolerance: float = 0.03
    """The least relative difference that counts, however quiet the windows."""
    max_prefetch: int = 8
    pin_memory: bool = False
    """Whether pinned memory may be tried (only when training on CUDA)."""


def spread(rates: Sequence[float]) -> float:
    """Relative spread of a config's window rates (stdev / mean); 0 with fewer than two."""
    if len(rates) < 2 or statistics.fmean(rates) <= 0:
        return 0.0
    return statistics.stdev(rates) / statistics.fmean(rates)


def noise(current: Sequence[float], candidate: Sequence[float], tolerance: float) -> float:
    """The relative difference two configs' medians must exceed to count."""
    return max(tolerance, spread(current), spread(candidate))


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
    more = (2, 1) if workers == 0 else (2 * workers, workers + 1)
    found = [
        *(_workers(settings, w) for w in more),
        _prefetch(settings, 2 * (settings.prefetch_factor or 2), options.max_prefetch),
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
    # torch's default depth, written out: one config, one key.
    return dataclasses.replace(
        settings, num_workers=workers, prefetch_factor=settings.prefetch_factor or 2
    )


def _prefetch(settings: Settings, depth: int, most: int) -> Settings | None:
    if settings.num_workers == 0 or depth > most:
        return None
    return dataclasses.replace(settings, prefetch_factor=depth)


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
        self.windows: dict[str, list[Window]] = {start.key(): []}
        self.configs: dict[str, Settings] = {start.key(): start}
        self._queue: list[Settings] = []

    def rates(self, settings: Settings) -> list[float]:
        """The window rates measured of ``settings`` in this climb."""
        return [w.samples_per_s for w in self.windows.get(settings.key(), [])]

    def add(self, window: Window) -> Verdict | None:
        """Count a window of :attr:`trying`; returns the verdict once it is judged."""
        if self.done:
            return None
        measured = self.windows[self.trying.key()]
        measured.append(window)
        if len(measured) < self.options.windows:
            return None
        verdict = None
        if self.trying != self.current:
            verdict = self._judge()
        else:
            self._queue = self._untried(self.current)
        self._next()
        return verdict

    def finish(self) -> None:
        """The budget is spent: stand on the best config kept so far."""
        self.done = True
        self.trying = self.current

    def _judge(self) -> Verdict:
        candidate, current = self.trying, self.current
        new, old = self.rates(candidate), self.rates(current)
        kept = keeps(candidate, new, current, old, self.options.tolerance)
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
