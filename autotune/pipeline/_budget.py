"""A time budget (search option ``budget``): the stages of a search planned to fit it once
the preflight has measured a probe's start and a step, and a deadline that plans the
stages left again before each later stage, so that one that would overrun is shortened
or skipped.

A plan gives up what harms the choice least first, and only what saves time:

1. the ceilings: only the diagnosis reads them;
2. the runoff: it separates finalists that each beat the default, within the noise of
   each other;
3. the tuning of the DDP keywords (several ranks): the winner is still measured as DDP;
4. confirming rounds past two: two still measure the noise between rounds;
5. the bounds and the worker sweep: their savings, and the batch size they give the
   first trials;
6. trials past :data:`ENOUGH_TRIALS`;
7. confirming rounds past one;
8. finalists past two, then past one;
9. trials past :data:`MIN_TRIALS`.

One confirming round of the finalists beside the default loader always runs, as the
choice rests on it: where even that least search does not fit, it runs all the same
and the plan says so.

Every plan fits the budget less :data:`RESERVE` of it: a plan is an estimate
from probes timed earlier, and a stage runs past it when the machine is busier than
it was then.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune._format import format_duration
from autotune._stages import PLANNED, Stage
from autotune.explore import readings_left, sweep_left
from autotune.pipeline._costs import ProbeCost, SearchShape, stage_seconds, trial_windows
from autotune.progress import Progress
from autotune.result import CEILINGS, BudgetPlan
from autotune.space import Space
from autotune.study import records
from autotune.workload import SearchOptions

MIN_TRIALS = 3
"""The fewest exploration trials a budget plans: the usual starting points' first few."""
ENOUGH_TRIALS = 8
"""Trials a budget keeps before it gives up confirming rounds: the usual starting points
and a few configs of the sampler's own."""

RESERVE = 0.1
"""The share of a budget a plan keeps back for its estimates' error."""


def room(budget_s: float) -> float:
    """The seconds a plan of ``budget_s`` fits its stages into: the budget less its
    :data:`RESERVE`."""
    return budget_s * (1 - RESERVE)


_Step = Callable[[SearchOptions, int], tuple[SearchOptions, int]]
"""A cut: (options, the fewest trials allowed) -> the same, with less to run."""

_STEPS: tuple[_Step, ...] = (
    lambda o, least: (dataclasses.replace(o, ceilings=False), least),
    lambda o, least: (dataclasses.replace(o, runoff_rounds=0), least),
    lambda o, least: (dataclasses.replace(o, ddp_knobs=False, ddp_finalists=False), least),
    lambda o, least: (dataclasses.replace(o, rounds=min(o.rounds, 2)), least),
    lambda o, least: (dataclasses.replace(o, bounds=False), least),
    lambda o, least: (o, min(least, ENOUGH_TRIALS)),
    lambda o, least: (dataclasses.replace(o, rounds=1), least),
    lambda o, least: (dataclasses.replace(o, finalists=min(o.finalists, 2)), least),
    lambda o, least: (dataclasses.replace(o, finalists=1), least),
    lambda o, least: (o, min(least, MIN_TRIALS)),
)
"""The cuts in the order of the module's docstring."""
_READS = {
    Stage.EXPLORE: ("trials", "timeout", "finalists"),
    Stage.CONFIRM: ("rounds",),
    Stage.RUNOFF: ("runoff_rounds",),
    Stage.DDP: ("ddp_knobs", "ddp_finalists"),
    Stage.CEILINGS: ("ceilings",),
}
"""The options each stage reads that a plan cuts: before a stage runs they are the
user's again, so that time an earlier stage left unspent brings back what it can."""


@dataclasses.dataclass(frozen=True)
class Fit:
    """Options whose trials fill the time the other stages leave, and what they cost."""

    options: SearchOptions
    stages: dict[Stage, float]
    """Seconds of each stage after the preflight (:data:`~autotune._stages.PLANNED`)."""
    total_s: float
    """The time spent so far and every stage's."""
    fits: bool


def fit(
    options: SearchOptions,
    least: int,
    *,
    budget_s: float,
    spent_s: float,
    shape: SearchShape,
    cost: ProbeCost,
) -> Fit:
    """``options`` with as many trials as the time left after the other stages holds, at
    most its own and at least ``least`` (when it has that many)."""
    stages = stage_seconds(shape, options, cost)
    others = sum(seconds for stage, seconds in stages.items() if stage != Stage.EXPLORE)
    if Stage.EXPLORE in shape.done:
        trials = options.trials
    else:
        per_trial = cost.seconds(trial_windows(options)) / max(1, shape.slots)
        room = budget_s - spent_s - others
        trials = min(options.trials, max(least, int(room // per_trial) if room > 0 else 0))
    planned = dataclasses.replace(options, trials=max(1, trials))
    stages = stage_seconds(shape, planned, cost)
    total = spent_s + sum(stages.values())
    return Fit(planned, stages, total, total <= budget_s)


def plan(
    options: SearchOptions,
    *,
    budget_s: float,
    spent_s: float,
    shape: SearchShape,
    cost: ProbeCost,
) -> Fit:
    """The options whose stages fit in ``budget_s`` with ``spent_s`` spent: the cuts of
    the module's docstring in order, until the stages fit, each kept only when it saves
    time or makes room for more trials. Past the last cut the least search remains, and
    ``fits`` is False."""

    def fitted(candidate: SearchOptions, least: int) -> Fit:
        return fit(candidate, least, budget_s=budget_s, spent_s=spent_s, shape=shape, cost=cost)

    least = options.trials
    best = fitted(options, least)
    base = options
    for step in _STEPS:
        if best.fits:
            break
        candidate, fewest = step(base, least)
        tried = fitted(candidate, fewest)
        if tried.total_s < best.total_s or tried.options.trials > best.options.trials:
            base, least, best = candidate, fewest, tried
    return best


_PARTS = (
    ("ceilings", CEILINGS),
    ("runoff_rounds", "the runoff"),
    ("ddp_knobs", "the DDP keywords' tuning"),
    ("bounds", "the bounds and the worker sweep"),
)
"""The options a plan turns off, and what a reader calls each, in the cuts' order."""
_COUNTS = (("rounds", "confirming rounds"), ("finalists", "finalists"), ("trials", "trials"))
"""The options a plan lowers, likewise."""


def changes(before: SearchOptions, after: SearchOptions) -> tuple[list[str], list[str]]:
    """What ``after`` leaves out of ``before``, and what it brings back, one phrase each
    in the cuts' order ("the runoff", "confirming rounds 3 -> 1")."""
    dropped: list[str] = []
    restored: list[str] = []
    for name, phrase in _PARTS:
        was, now = bool(getattr(before, name)), bool(getattr(after, name))
        if was != now:
            (dropped if was else restored).append(phrase)
    for name, noun in _COUNTS:
        was, now = getattr(before, name), getattr(after, name)
        if was != now:
            (dropped if now < was else restored).append(f"{noun} {was} -> {now}")
    return dropped, restored


def left_out(given: SearchOptions, planned: SearchOptions) -> list[str]:
    """What ``planned`` leaves out of ``given``, one phrase each, in the cuts' order."""
    return changes(given, planned)[0]


def record(given: SearchOptions, found: Fit, *, budget_s: float, spent_s: float) -> BudgetPlan:
    """The plan ``found`` for the options ``given``, as the result keeps it; the time
    ``spent_s`` before it counts as the preflight's."""
    return BudgetPlan(
        seconds=budget_s,
        planned_s=found.total_s,
        stages=(
            (Stage.PREFLIGHT, spent_s),
            *((stage, found.stages[stage]) for stage in PLANNED if found.stages[stage] > 0),
        ),
        trials=found.options.trials,
        rounds=found.options.rounds,
        left_out=tuple(left_out(given, found.options)),
        fits=found.fits,
    )


class Deadline:
    """A search's budget in force: the plan made after the preflight, and the stages left
    planned again before each later stage, into the time then left, from the user's
    options for them: a stage that would overrun is shortened or skipped, and one an
    earlier stage's unspent time makes room for comes back. Every plan fits the budget
    less its :data:`RESERVE`. Without a budget (``budget_s`` None) every check gives the
    options back as they are."""

    def __init__(
        self,
        budget_s: float | None,
        *,
        started: float,
        shape: SearchShape,
        cost: ProbeCost,
        study: optuna.Study | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget_s = budget_s
        self.room_s = 0.0 if budget_s is None else room(budget_s)
        """The seconds the plans fit: the budget less its reserve."""
        self.started = started
        self.shape = shape
        self.cost = cost
        self.clock = clock
        self.plan: BudgetPlan | None = None
        """The plan and what was left out; None without a budget."""
        self.given: SearchOptions | None = None
        """The user's options, which every plan starts from."""
        self.study = study
        """Where this search's trials go: what they took corrects a probe's cost."""
        self._first_trial = len(study.trials) if study is not None else 0
        self._overrun = False

    def spent(self) -> float:
        """Seconds since the search started."""
        return self.clock() - self.started

    def first_plan(self, options: SearchOptions, progress: Progress) -> SearchOptions:
        """Plan every stage after the preflight, say so in one line, and return the
        options the search runs with."""
        if self.budget_s is None:
            return options
        spent = self.spent()
        found = plan(options, budget_s=self.room_s, spent_s=spent, shape=self.shape, cost=self.cost)
        self.plan = record(options, found, budget_s=self.budget_s, spent_s=spent)
        self.given, self._overrun = options, not found.fits  # the plan's line says so
        progress.message(self.plan.describe())
        return found.options

    def exploring(self, options: SearchOptions, progress: Progress) -> SearchOptions:
        """The options exploration runs with: the stages left planned again, and a
        timeout after which no trial starts, so that the last one, run in full, ends in
        time for the stages after it. At least :data:`MIN_TRIALS` full trials' time
        is given all the same."""
        planned = self._replan(options, {Stage.BOUNDS, Stage.WORKERS}, progress)
        if self.budget_s is None:
            return planned
        stages = stage_seconds(self._shape({Stage.BOUNDS, Stage.WORKERS}), planned, self.cost)
        later = sum(s for stage, s in stages.items() if stage != Stage.EXPLORE)
        full = self.cost.seconds(planned.max_windows)
        least = min(planned.trials, MIN_TRIALS) * full / max(1, self.shape.slots)
        timeout = max(least, self.room_s - self.spent() - later - full)
        if planned.timeout is not None:
            timeout = min(timeout, planned.timeout)
        return dataclasses.replace(planned, timeout=timeout)

    def confirming(
        self, options: SearchOptions, round_of: Callable[[SearchOptions], int], progress: Progress
    ) -> SearchOptions:
        """The options the confirming rounds and the runoff run with: first the finalists
        the time left takes, then the rounds of the round ``round_of`` makes of those
        options (its configs, the default loader's included). In that order, as a search
        that explored past its plan has time for fewer finalists than planned before it,
        and a round made of them all could only be cut to fewer rounds."""
        done = {Stage.BOUNDS, Stage.WORKERS, Stage.EXPLORE}
        finalists = self._replan(options, done, progress)
        return self._replan(finalists, done, progress, round_configs=round_of(finalists))

    def ddp(self, options: SearchOptions, progress: Progress) -> SearchOptions:
        """The options the DDP stage runs with."""
        return self._replan(options, {*PLANNED} - {Stage.DDP, Stage.CEILINGS}, progress)

    def keeps_ceilings(self, options: SearchOptions, progress: Progress) -> bool:
        """Whether the ceilings stage runs: on in ``options``, and in time."""
        return self._replan(options, {*PLANNED} - {Stage.CEILINGS}, progress).ceilings

    def _learn(self) -> None:
        """A probe's start as this search's trials took it: the median of what each ran
        beyond its warm-up and windows, and of its loader's start to its first batch.
        The preflight timed one probe; the trials time them on the machine as it is
        loaded now, teardown included."""
        if self.study is None:
            return
        ran = [
            (record.duration_s, record.figures)
            for record in records(self.study)
            if record.number >= self._first_trial
            and record.probed
            and record.failure is None
            and record.figures is not None
            and record.duration_s is not None
        ]
        overheads = [
            took - self.cost.warmup_s - len(figures.windows) * self.cost.window_s
            for took, figures in ran
        ]
        loaders = [figures.startup_s for _, figures in ran if figures.startup_s is not None]
        if overheads:
            self.cost = dataclasses.replace(
                self.cost, start_s=max(0.0, statistics.median(overheads))
            )
        if loaders:
            self.cost = dataclasses.replace(self.cost, loader_start_s=statistics.median(loaders))

    def _shape(self, done: set[Stage], round_configs: int | None = None) -> SearchShape:
        return dataclasses.replace(
            self.shape,
            done=frozenset(done),
            round_configs=round_configs if round_configs is not None else self.shape.round_configs,
        )

    def _replan(
        self,
        options: SearchOptions,
        done: set[Stage],
        progress: Progress,
        *,
        round_configs: int | None = None,
    ) -> SearchOptions:
        """The options of the stages not ``done`` planned again from the user's into the
        time left, in the plan's order; what changed recorded and said in one line."""
        if self.budget_s is None or self.plan is None or self.given is None:
            return options
        self._learn()
        spent = self.spent()
        ahead = [name for stage, names in _READS.items() if stage not in done for name in names]
        found = plan(
            dataclasses.replace(options, **{name: getattr(self.given, name) for name in ahead}),
            budget_s=self.room_s,
            spent_s=spent,
            shape=self._shape(done, round_configs),
            cost=self.cost,
        )
        left_s = max(0.0, self.budget_s - spent)
        kept = format_duration(min(left_s, self.budget_s - self.room_s))
        left = f"budget: {format_duration(left_s)} left ({kept} of it kept in reserve)"
        dropped, restored = changes(options, found.options)
        said = [
            f"{what}: {', '.join(phrases)}"
            for what, phrases in (("left out", dropped), ("back in", restored))
            if phrases
        ]
        if said:
            self.plan = dataclasses.replace(
                self.plan, left_out=tuple(left_out(self.given, found.options))
            )
            progress.message(f"{left}; {'; '.join(said)}")
        if not found.fits and not self._overrun:  # said once: each later check would repeat it
            self._overrun = True
            progress.message(
                f"{left}, short of the least of the stages left, which run all the same"
            )
        return found.options


def search_shape(
    options: SearchOptions,
    *,
    info: Mapping[str, Any],
    space: Space,
    user_space: Mapping[str, Any],
    study: optuna.Study,
    slots: int,
    ranks: int,
) -> SearchShape:
    """What the search has left to run, after the preflight and what ``study`` holds: the
    readings and sweep probes still to take, the probes at once, and the DDP facts with
    several ranks."""
    return SearchShape(
        bounds=readings_left(space, study),
        sweep_probes=sweep_left(space, user_space, study),
        slots=slots,
        in_turns=options.backend == "optuna",
        ddp_info=info if ranks > 1 else None,
        batches=len(space.batch_size.values()) > 1,
    )


def start_budget(
    options: SearchOptions,
    shape: SearchShape,
    *,
    started: float,
    probe_start_s: float,
    step_s: float,
    study: optuna.Study,
    progress: Progress,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[SearchOptions, Deadline]:
    """The options a search runs with and the deadline that holds its later stages to
    ``options.budget``, after the preflight: a probe costs ``probe_start_s`` before its
    first batch (the preflight's own time) and windows of at least the ``step_s`` it
    timed."""
    cost = ProbeCost.of(options, start_s=probe_start_s, step_s=step_s)
    deadline = Deadline(
        options.budget, started=started, shape=shape, cost=cost, study=study, clock=clock
    )
    return deadline.first_plan(options, progress), deadline
