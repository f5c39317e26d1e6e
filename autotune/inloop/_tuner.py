"""The tuner: turns the loader's timings into windows, windows into climb moves, and
decides which config should run; it logs each decision and records the choice.

It never touches a DataLoader: the loader asks it for :attr:`Tuner.wanted` and tells
it what it started (:meth:`Tuner.started`) and what each batch took
(:meth:`Tuner.fetched`).
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable

from autotune._errors import AutotuneError
from autotune._format import format_rate
from autotune.inloop._budget import Budget
from autotune.inloop._climb import (
    Climb,
    ClimbOptions,
    wait_share,
    wants_persistent,
    without_persistence,
)
from autotune.inloop._clock import WARM_UP, StepClock
from autotune.inloop._ddp import SYNC_STEPS, Ranks
from autotune.inloop._record import Choice, measurements, record_choice
from autotune.inloop._watch import Watch
from autotune.machine import detect_machine
from autotune.probe import Figures, Measurement, Window
from autotune.result import SearchResult
from autotune.settings import Settings, fix_allocator
from autotune.study import StudyLocation


@dataclasses.dataclass(frozen=True, kw_only=True)
class TunerOptions:
    """What the caller of ``autotune.online`` chose, besides the data."""

    climb: ClimbOptions
    budget: Budget
    window_seconds: float
    retune: bool
    device: str
    retune_seconds: float = 30.0
    """How long throughput must stay down before a climb starts again."""
    record: StudyLocation | None = None
    ranks: Ranks | None = None
    epoch_batches: int | None = None
    """Batches per epoch, when the dataset has a length."""


class Tuner:
    """One loader's tuning, from its first climb to the end of training.

    Args:
        start: the config the first climb starts from.
        options: how it climbs, for how long, and where it records.
        log: where its one-line messages go.
        now: the clock, in seconds (a fake one in tests).
    """

    def __init__(
        self,
        start: Settings,
        options: TunerOptions,
        log: logging.Logger,
        *,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.options = options
        self.log = log
        self.wanted = start
        """The config that should run now (persistence applies from the next epoch)."""
        self.running: Settings | None = None
        self.climb: Climb | None = Climb(without_persistence(start), options.climb)
        self.budget = options.budget
        self.watch: Watch | None = None
        self.clock = StepClock(options.window_seconds, now=now)
        self.startups: dict[str, float] = {}
        self.epoch_batches = options.epoch_batches
        self.result: SearchResult | None = None
        """The SearchResult last recorded, when recording."""
        self._recorded: Choice | None = None
        """The choice last recorded, to record again when its persistence changes."""
        self._why = "climb start"
        self._settled_rate: float | None = None
        """The settled config's measured samples/s, once settled."""
        self._steps = 0
        """Steps of this epoch (under DDP: the meetings' count)."""
        self._meet_until = 0
        """Under DDP: the step of this epoch up to which every rank has batches."""
        self._load_cpu = self._load_wall = 0.0
        """CPU and wall time of the loads made in the loop's own thread (no workers)."""

    # ------------------------------------------------------------ loader's calls
    def started(self, settings: Settings, lead: int = 0) -> None:
        """The loader started an iterator with ``settings`` (a switch, or a new epoch).

        Args:
            settings: its config.
            lead: batches the old iterator hands over first (a switch that hands over:
                the new workers start meanwhile, so their start-up is not seen whole).
        """
        if self.running is not None and settings != self.running:
            self.log.info(
                "online: switch %s -> %s (%s)",
                self.running.describe(),
                settings.describe(),
                self._why,
            )
        self.running = settings
        self.clock.restart(settings.batches_ahead, lead=lead)

    def fetched(self, asked: float, samples: int, cpu_seconds: float | None = None) -> None:
        """A batch of ``samples`` was handed over; the user asked for it at ``asked``.

        Args:
            asked: when the user asked (the clock's time).
            samples: the samples in the batch.
            cpu_seconds: the CPU time the loop's thread spent in ``next()`` for it.
        """
        first = self.clock.starting_cold
        lead = self.clock.leading
        waited = self.clock.now() - asked
        seconds, window = self.clock.fetched(asked, samples)
        if first and self.running is not None:
            self.startups[without_persistence(self.running).key()] = seconds
            if self.climb is None:
                self._persist_from_next_epoch(seconds)
        if cpu_seconds is not None and self.running is not None and not self.running.num_workers:
            self._load_cpu += cpu_seconds
            self._load_wall += waited
        if self.climb is not None:
            # The old config's batches handed over after a switch are not the new one's
            # measuring: they cost the climb nothing.
            self._climbing(seconds, window, spend=not lead)
        elif window is not None and window.index != WARM_UP:
            self._watching(window)

    def asking(self, asked: float) -> None:
        """The user asks for a batch at ``asked``, before the loader is asked: without
        workers, the first ask after a start-up already tells how long a load takes (the
        start-up batch's) and how long the loop trains on it, so a loop that waits most
        of its time jumps before it loads another batch in its own thread."""
        climb, running = self.climb, self.running
        if climb is None or climb.done or running is None or running.num_workers:
            return
        window = self.clock.first_look(asked)
        if window is None:
            return
        before = climb.trying
        climb.glance(window, cpu_share=self._cpu_share())
        if climb.trying != before:
            self._why = (
                f"the start, {before.describe()}: its first batch took {window.wait_seconds:.2f} s "
                f"to load, {wait_share([window]):.0%} of its step"
            )
            self.wanted = climb.trying

    def _cpu_share(self) -> float | None:
        return self._load_cpu / self._load_wall if self._load_wall > 0 else None

    def epoch_starting(self, batches: int | None) -> None:
        """An epoch of ``batches`` batches (None: unknown) starts, before its first batch.

        Under DDP, while climbing, the ranks meet here: every rank starts each epoch,
        whatever its batch count, so they agree here up to which step of the epoch all
        of them will meet again.
        """
        self._steps = 0
        ranks, climb = self.options.ranks, self.climb
        if ranks is None or climb is None:
            return
        self._meet_until, ends = ranks.epoch_starts(batches, self._spent(climb), climb.done)
        if ends:
            self._settle(climb)

    def epoch_ended(self, batches: int) -> None:
        """An epoch ended after ``batches`` batches."""
        if self.epoch_batches is None:
            self.epoch_batches = batches
        # Workers, persistent or new, prefetch again at the start of the next epoch.
        self.clock.restart(self.running.batches_ahead if self.running else 0)

    # ------------------------------------------------------------ climbing
    def _climbing(self, seconds: float, window: Window | None, spend: bool = True) -> None:
        climb = self.climb
        assert climb is not None  # called only while climbing
        running = without_persistence(self.running) if self.running else None
        measuring = not climb.done and running == climb.trying
        if measuring and spend:
            self.budget.spend(seconds)
            if window is not None:
                self._judge(climb, window)
        if self._climb_ends(climb):
            self._settle(climb)
        else:
            self.wanted = climb.trying

    def _judge(self, climb: Climb, window: Window) -> None:
        measured = climb.trying
        share = self._cpu_share()
        if window.index == WARM_UP:
            climb.glance(window, cpu_share=share)
            verdict = None
        else:
            verdict = climb.add(window, cpu_share=share)
        if verdict is not None:
            self._why = verdict.describe()
        elif climb.trying != measured:
            rate = statistics.median(climb.rates(measured))
            self._why = f"the start, {measured.describe()}: {format_rate(rate)} samples/s"

    def _climb_ends(self, climb: Climb) -> bool:
        ranks = self.options.ranks
        spent = self._spent(climb)
        if ranks is None:
            return climb.done or spent
        self._steps += 1
        # Past the agreed count some rank may have run out of batches: no meeting there.
        meets = self._steps % SYNC_STEPS == 0 and self._steps <= self._meet_until
        return meets and ranks.ends(spent, climb.done)

    def _spent(self, climb: Climb) -> bool:
        # The budget may run over to judge the first move: a jump's start-up and warm-up
        # alone can take more steps than a small budget has, and a climb that never
        # judged a move would stand on its start for no measured reason.
        return self.budget.over and climb.judged

    def _settle(self, climb: Climb) -> None:
        ended = "the budget ended the climb"
        if climb.done:
            ended = "no move left that wins" if climb.judged else _idle_reason(climb)
        climb.finish()
        choice = self._persistence(climb.current)
        ranks = self.options.ranks
        if ranks is not None:
            choice = ranks.agree(choice)
        self.wanted = choice
        self.climb = None
        self._why = "settled"
        rates = climb.rates(without_persistence(choice))
        self._settled_rate = statistics.median(rates) if rates else None
        # Under DDP a rank climbing again alone would miss the others at the next meeting.
        if self.options.retune and ranks is None:
            self.watch = Watch(settled=self._settled_rate, seconds=self.options.retune_seconds)
        summary = self._summary(climb, choice)
        self.log.info("online: settled on %s: %s; %s", choice.describe(), summary, ended)
        if self.options.record is not None and (ranks is None or ranks.rank == 0):
            self._record(climb, choice)

    def _persist_from_next_epoch(self, startup: float) -> None:
        """A settled config started cold (a new epoch) without persistent workers: keep
        them from the next epoch on when starting them costs enough. The climb reaches
        most configs by a hand-over, which hides their start-up; an epoch's start shows
        it whole."""
        running = self.running
        if running is None or running.num_workers == 0 or running.persistent_workers:
            return
        # Under DDP the ranks agree on their settings when they settle, not alone after.
        if running != self.wanted or self.options.ranks:
            return
        epoch_seconds = self._epoch_seconds(running, self._settled_rate)
        if epoch_seconds is not None and wants_persistent(startup, epoch_seconds):
            self.wanted = dataclasses.replace(running, persistent_workers=True)
            self.log.info(
                "online: persistent workers from the next epoch: starting %d took %.2f s, "
                "%.1f%% of an epoch",
                running.num_workers,
                startup,
                100 * startup / epoch_seconds,
            )
            self._record_persistence(self.wanted)

    def _persistence(self, settings: Settings) -> Settings:
        if settings.num_workers == 0:
            return settings
        rates = self._rates(settings)
        epoch_seconds = self._epoch_seconds(settings, statistics.median(rates) if rates else None)
        startup = self.startups.get(settings.key())
        return dataclasses.replace(
            settings, persistent_workers=wants_persistent(startup, epoch_seconds)
        )

    def _epoch_seconds(self, settings: Settings, rate: float | None) -> float | None:
        """An epoch's seconds at ``rate`` samples/s; None when either is unknown."""
        if not rate or self.epoch_batches is None:
            return None
        return self.epoch_batches * settings.batch_size / rate

    def _rates(self, settings: Settings) -> list[float]:
        return self.climb.rates(without_persistence(settings)) if self.climb else []

    def _summary(self, climb: Climb, choice: Settings) -> str:
        rates = climb.rates(without_persistence(choice))
        tried = len(climb.measured())
        text = f"{format_rate(statistics.median(rates)) if rates else '-'} samples/s"
        base = Settings(batch_size=choice.batch_size)
        base_rates = climb.rates(base)
        if rates and base_rates and choice != base:
            base_rate = statistics.median(base_rates)
            text += f", {statistics.median(rates) / base_rate:.2f}x the default loader's"
            text += f" {format_rate(base_rate)}"
        spent = self.budget
        return (
            f"{text}; {tried} config(s) measured in {spent.spent_batches} steps, "
            f"{spent.spent_seconds:.1f} s"
        )

    def _watching(self, window: Window) -> None:
        watch = self.watch
        if watch is not None and watch.add(window.samples_per_s, window.seconds):
            self._climb_again(watch.settled or 0.0)

    def _climb_again(self, settled: float) -> None:
        running = self.running or self.wanted
        self.log.info(
            "online: throughput below %.0f%% of the settled %s samples/s for %g s; "
            "climbing again from %s",
            100 * (self.watch.ratio if self.watch else 0.0),
            format_rate(settled),
            self.options.retune_seconds,
            running.describe(),
        )
        self.watch = None
        self.climb = Climb(without_persistence(running), self.options.climb)
        self.budget = self.budget.fresh()
        self._why = "climbing again"

    # ------------------------------------------------------------ recording
    def _record(self, climb: Climb, choice: Settings) -> None:
        path = self.options.record
        assert path is not None  # called only when recording
        measured = measurements(climb.measured(), self.startups)
        own = next(
            (m for m in measured if m.settings == without_persistence(choice)),
            Measurement(settings=choice, figures=Figures()),
        )
        chosen = Measurement(settings=choice, figures=own.figures)
        record = Choice(
            chosen=chosen,
            measured=measured,
            device=self.options.device,
            machine=detect_machine(self.options.device.split(":")[0]),
            tolerance=self.options.climb.tolerance,
            # the rule its loaders were built under (fix_allocator is idempotent)
            workload={
                "online": True,
                "epoch_batches": self.epoch_batches,
                "allocator": fix_allocator(),
            },
        )
        self._save(path, record, trials=True)

    def _record_persistence(self, choice: Settings) -> None:
        """The recorded choice, now with persistent workers: what the loader goes on with
        (the climb's trials are in the study already)."""
        recorded, path = self._recorded, self.options.record
        if recorded is None or path is None:
            return
        chosen = dataclasses.replace(recorded.chosen, settings=choice)
        self._save(path, dataclasses.replace(recorded, chosen=chosen), trials=False)

    def _save(self, path: StudyLocation, record: Choice, *, trials: bool) -> None:
        try:
            self.result = record_choice(path, record, trials=trials)
        except AutotuneError as error:  # the training matters more than its record
            self.log.warning("online: could not record the choice in %s: %s", path, error)
            return
        self._recorded = record


def _idle_reason(climb: Climb) -> str:
    rates = climb.windows.get(climb.current.key(), [])
    return (
        f"the loop waited {wait_share(rates):.1%} of its steps for data: no loader setting "
        "can gain more than that"
    )
