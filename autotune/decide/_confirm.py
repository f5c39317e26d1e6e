"""Confirming: the finalists and the default loader measured again in interleaved
rounds, the default first, last and after every two finalists (D A B D C E D, then in
turning order), each a new full-length probe, then the verdict of
:mod:`autotune.decide._rounds`; and a runoff of more rounds between the finalists the
rounds left within the noise of each other."""

from __future__ import annotations

import dataclasses

import optuna

from autotune._noise import pooled_log_spread
from autotune._stages import Stage
from autotune.decide._choose import OVERLAP_FACTOR, Candidate, cheapest_within, finalists, merge
from autotune.decide._rounds import (
    RUNOFF,
    Rounds,
    contested,
    extended,
    gather,
    interleaved,
    round_length,
    round_noise,
    runoff_verdict,
    verdict,
)
from autotune.decide._sequential import SETTLED_FROM, runoff_settled, settled, standing
from autotune.explore import Backend, Bounds, ExplorePlan
from autotune.probe import Measurement
from autotune.progress import Progress
from autotune.result import Confirmation
from autotune.settings import Settings
from autotune.space import Space
from autotune.study import Attr, TrialRecord, records

_MEASURED = ("COMPLETE", "PRUNED")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmed(Confirmation):
    """What the confirming rounds measured, and the config chosen."""

    winner: Measurement
    """The chosen config, with the figures of its median round (from exploration figures
    when ``confirmed`` is False)."""


def explored_candidates(
    study: optuna.Study, space: Space, states: tuple[str, ...] = _MEASURED
) -> list[Candidate]:
    """Exploration measurements of configs in the current space, of trials in ``states``
    (by default pruned ones too: a config within noise of the best may have been pruned
    by one unlucky window). Failed trials are left out, whatever figures they reported
    before failing."""
    candidates = []
    for record in records(study):
        if (
            record.role == "explore"
            and record.state in states
            and record.failure is None
            and record.settings is not None
            and record.value is not None
            and space.contains(record.settings)
        ):
            candidates.append(Candidate(record.settings, record.value))
    return candidates


def fastest_in_full(study: optuna.Study, space: Space) -> Candidate | None:
    """The fastest config of the space that exploration measured in full (every window:
    not pruned, not failed), its figure the median of its trials; None when none was."""
    full = explored_candidates(study, space, states=("COMPLETE",))
    return max(merge(full), key=lambda c: c.samples_per_s) if full else None


def confirm(
    runner: Backend,
    plan: ExplorePlan,
    explored: list[Candidate],
    baseline: Settings,
    progress: Progress,
    *,
    later: int,
    default_threads: int | None = None,
) -> Confirmed:
    """Measure the finalists and the default loader again in interleaved rounds, and
    choose.

    Args:
        default_threads: the threads torch runs the default loader's training with (the
            preflight's figure): a finalist that only spells them out is the default.
    """
    options = plan.options
    user_batch = baseline.batch_size
    configs, notes = _finalist_settings(plan, explored, baseline, default_threads)
    order = round_order(runner, plan, configs, baseline)
    _announce(runner, plan, configs, order, notes, progress, later=later)
    finalist_rounds, default = _sequential_rounds(runner, plan, order, baseline, progress)
    taken = len(default.measurements)
    noise = round_noise(finalist_rounds)
    band = max(options.tolerance, noise)
    try:
        pick = verdict(
            finalist_rounds, default, band=band, tolerance=options.tolerance, user_batch=user_batch
        )
    except ValueError:
        progress.message("no config survived re-measuring; choosing from exploration figures")
        return Confirmed(
            winner=_from_exploration(plan.study, explored, options.tolerance, user_batch),
            finalists=(),
            baseline=default.typical() if default.rates else None,
            confirmed=False,
            rounds=taken,
        )
    rounds = taken
    runoff = _decide_runoff(
        runner, plan, finalist_rounds, default, noise, progress, later=later, user_batch=user_batch
    )
    if runoff is not None:
        pick, default, finalist_rounds = runoff
        rounds = len(default.measurements)
    return _confirmed(pick, finalist_rounds, default, rounds=rounds, noise=noise)


def _confirmed(
    pick: Rounds, finalist_rounds: list[Rounds], default: Rounds, *, rounds: int, noise: float
) -> Confirmed:
    """The confirmation of ``pick``: its figures and those of the complete finalists and
    default loader, with the spreads of their rounds."""
    return Confirmed(
        winner=pick.typical(),
        finalists=tuple(r.typical() for r in finalist_rounds if r.complete),
        baseline=default.typical() if default.complete else None,
        confirmed=True,
        rounds=rounds,
        noise=noise,
        rates=pick.rates,
        rates_spread=pooled_log_spread(
            [r.rates for r in (*finalist_rounds, default) if r.complete]
        ),
        speedup_rounds=pick.speedups if default.complete else (),
        speedup_spread=(
            pooled_log_spread([r.speedups for r in finalist_rounds if r.complete])
            if default.complete
            else None
        ),
        is_default=pick is default,
    )


def _announce(
    runner: Backend,
    plan: ExplorePlan,
    configs: list[Settings],
    order: list[Settings],
    notes: list[str],
    progress: Progress,
    *,
    later: int,
) -> None:
    """Open the confirming phase: what it measures and how, the notes on the finalists
    under it, and its planned probes."""
    options = plan.options
    beside = (
        "each round in turns in one process"
        if runner.in_turns(plan) and configs
        else "the default beside every two"
    )
    progress.phase(
        Stage.CONFIRM,
        f"measuring {len(configs)} finalist(s) and the default loader again, in "
        f"{options.rounds} interleaved round(s), {beside}",
    )
    for note in notes:  # under the phase whose finalists they count among
        progress.message(note)
    progress.plan(Stage.CONFIRM, len(order) * options.rounds, None, later=later)


def _decide_runoff(
    runner: Backend,
    plan: ExplorePlan,
    finalist_rounds: list[Rounds],
    default: Rounds,
    noise: float,
    progress: Progress,
    *,
    later: int,
    user_batch: int,
) -> tuple[Rounds, Rounds, list[Rounds]] | None:
    """Run the runoff where the rounds left finalists within the noise of each other: the
    pick, the default's rounds and the finalists' rounds as the runoff left them; None
    where there was no runoff or it decided nothing."""
    options = plan.options
    band = max(options.tolerance, noise)
    contenders = contested(finalist_rounds, default, band=band, tolerance=options.tolerance)
    if not (contenders and options.runoff_rounds):
        return None
    after = len(default.measurements)
    settled = _runoff(runner, plan, contenders, default, noise, progress, later=later, after=after)
    decided = runoff_verdict(
        settled.finalists, settled.default, tolerance=options.tolerance, user_batch=user_batch
    )
    if decided is None:
        progress.message("no finalist of the runoff was measured in every round of it")
        return None
    longer = {r.settings.key(): r for r in settled.finalists}
    return decided, settled.default, [longer.get(r.settings.key(), r) for r in finalist_rounds]


def _sequential_rounds(
    runner: Backend,
    plan: ExplorePlan,
    order: list[Settings],
    baseline: Settings,
    progress: Progress,
) -> tuple[list[Rounds], Rounds]:
    """The confirming rounds, measured one at a time from the second on: each further
    round measures only the finalists that can still be chosen
    (:func:`autotune.decide._sequential.standing`), and none is measured once the rounds
    so far settle the choice (:func:`autotune.decide._sequential.settled`). The
    finalists' rounds (those no longer measured keep the rounds they had) and the
    default loader's."""
    options = plan.options
    first = min(options.rounds, SETTLED_FROM)
    finalist_rounds, default = measure_rounds(runner, plan, order, baseline, first)
    for number in range(first + 1, options.rounds + 1):
        band = max(options.tolerance, round_noise(finalist_rounds))
        done = settled(
            finalist_rounds,
            default,
            band=band,
            rounds=options.rounds,
            tolerance=options.tolerance,
            user_batch=baseline.batch_size,
        )
        if done is not None:
            progress.message(f"after {number - 1} rounds: {done.reason}")
            break
        left = standing(
            finalist_rounds, default, rounds=options.rounds, tolerance=options.tolerance
        )
        if len(left) < len(finalist_rounds):
            progress.message(
                f"round {number}: {len(left)} of {len(finalist_rounds)} finalists measured "
                "again; the others can no longer beat the default loader beyond the noise "
                "(each was slower in a round, within the tolerance in too many, or failed one)"
            )
        more_order = round_order(runner, plan, [r.settings for r in left], baseline)
        finalist_rounds, default = _one_round_more(
            runner, plan, more_order, number, finalist_rounds, default
        )
    return finalist_rounds, default


def _one_round_more(
    runner: Backend,
    plan: ExplorePlan,
    order: list[Settings],
    number: int,
    finalists: list[Rounds],
    default: Rounds,
) -> tuple[list[Rounds], Rounds]:
    """Round ``number`` of the configs in ``order`` (laid out by :func:`interleaved`),
    added to the rounds of ``finalists`` it measured (the others keep theirs) and to the
    default loader's."""
    more, more_default = measure_rounds(runner, plan, order, default.settings, 1, first=number)
    by_key = {r.settings.key(): r for r in more}
    finalists = [
        extended(r, by_key[r.settings.key()]) if r.settings.key() in by_key else r
        for r in finalists
    ]
    return finalists, extended(default, more_default)


def round_configs(
    plan: ExplorePlan,
    explored: list[Candidate],
    baseline: Settings,
    default_threads: int | None = None,
) -> int:
    """The configs of one confirming round :func:`confirm` would measure from these
    explored figures, the finalists and the default loader: what a time budget weighs
    before the rounds start."""
    configs, _ = _finalist_settings(plan, explored, baseline, default_threads)
    return len(configs) + 1


def round_order(
    runner: Backend, plan: ExplorePlan, configs: list[Settings], default: Settings
) -> list[Settings]:
    """The configs of one round of ``configs`` beside the default loader, in the order
    ``runner`` measures them (:func:`~autotune.decide._rounds.interleaved`)."""
    return interleaved(configs, default, in_turns=runner.in_turns(plan) and bool(configs))


@dataclasses.dataclass(frozen=True)
class _Settled:
    """The runoff's finalists and the default loader, each with the first rounds and the
    runoff's."""

    finalists: list[Rounds]
    default: Rounds


def _runoff(
    runner: Backend,
    plan: ExplorePlan,
    contenders: list[Rounds],
    default: Rounds,
    noise: float,
    progress: Progress,
    *,
    later: int,
    after: int,
) -> _Settled:
    """Measure ``contenders`` and the default loader in ``runoff_rounds`` more interleaved
    rounds, turning on from the ``after`` rounds measured so far."""
    options = plan.options
    order = round_order(runner, plan, [r.settings for r in contenders], default.settings)
    progress.phase(
        Stage.RUNOFF,
        f"{len(contenders)} finalists within the noise ({noise:.0%}) of each other: "
        f"{options.runoff_rounds} more interleaved round(s) between them and the default",
    )
    progress.plan(Stage.RUNOFF, len(order) * options.runoff_rounds, None, later=later)
    total = after + options.runoff_rounds
    for number in range(after + 1, total + 1):
        contenders, default = _one_round_more(runner, plan, order, number, contenders, default)
        if number == total:
            break
        done = runoff_settled(
            contenders,
            rounds=total,
            tolerance=options.tolerance,
            user_batch=default.settings.batch_size,
        )
        if done is not None:
            progress.message(
                f"after {number - after} runoff round(s): {done.settings.describe()} trails "
                "no other finalist by more than the tolerance in most of the rounds to "
                "measure, and each cheaper one trails another by more: the choice is settled"
            )
            break
    return _Settled(finalists=contenders, default=default)


def measure_rounds(
    runner: Backend,
    plan: ExplorePlan,
    order: list[Settings],
    default: Settings,
    rounds: int,
    *,
    first: int = 1,
) -> tuple[list[Rounds], Rounds]:
    """Measure the configs of ``order`` (the default loader among them) in ``rounds``
    interleaved rounds numbered from ``first``; returns the other configs' rounds, in
    order, and the default loader's (:func:`~autotune.decide._rounds.gather`)."""
    groups = runner.measure(plan, order, _roles(order, default), rounds, first=first)
    return gather(order, measured_rounds(plan.study, groups, len(order)))


def _roles(order: list[Settings], default: Settings) -> list[str]:
    """The study role of each probe of a round: the default loader's, or a finalist's."""
    return ["baseline" if settings == default else "confirm" for settings in order]


def same_as_default(settings: Settings, default: Settings, default_threads: int | None) -> bool:
    """Whether ``settings`` is the default loader's own config: the same knobs, the threads
    either unset or the ones torch uses by default."""
    if settings.threads is not None and settings.threads == default_threads:
        settings = dataclasses.replace(settings, threads=None)
    return settings == default


def _finalist_settings(
    plan: ExplorePlan,
    explored: list[Candidate],
    baseline: Settings,
    default_threads: int | None,
) -> tuple[list[Settings], list[str]]:
    """The finalists, the fastest config exploration measured in full, the leader's loader
    without workers when it trains at its compute ceiling, and the persistent twins of
    the fastest finalists; never the default loader,
    which every round measures anyway (measured twice, it could beat itself and be
    recommended as if it were not the default), nor a config that is the default in
    effect (its threads spelled out as torch's default). With them, a line for each
    config that joined the finalists without being one, saying why."""
    tolerance = plan.options.tolerance
    chosen = finalists(explored, tolerance, plan.options.finalists, user_batch=baseline.batch_size)
    configs = [
        c.settings for c in chosen if not same_as_default(c.settings, baseline, default_threads)
    ]
    notes: list[str] = []
    steadiest = fastest_in_full(plan.study, plan.space)
    if (
        steadiest is not None
        and steadiest.settings.key() not in {s.key() for s in configs}
        and not same_as_default(steadiest.settings, baseline, default_threads)
    ):
        # The finalists are those within twice the tolerance of the best figure, and a
        # pruned trial's figure is its last window: one lucky window of 0.5 s can leave
        # out the config that held its pace over every window.
        notes.append(
            f"{steadiest.settings.describe()}: the fastest config exploration measured in "
            "full, confirmed beside the finalists"
        )
        configs.append(steadiest.settings)
    lighter = without_workers(chosen[0], plan.bounds, plan.space, tolerance) if chosen else None
    if (
        lighter is not None
        and lighter.key() not in {s.key() for s in configs}
        and not same_as_default(lighter, baseline, default_threads)
    ):
        notes.append(
            f"{chosen[0].settings.describe()} trains at the model's own ceiling: its loader "
            "without workers is confirmed beside it"
        )
        configs.append(lighter)
    for twin in persistent_twins(chosen, plan.space):
        if twin.key() not in {s.key() for s in configs}:
            notes.append(
                f"{twin.describe()}: the persistent twin of a finalist, confirmed beside it"
            )
            configs.append(twin)
    return configs, notes


TWINS = 2
"""At most this many persistent twins are confirmed (each costs a probe a round)."""


def most_finalists(limit: int) -> int:
    """The most configs a confirming round measures beside the default loader for a
    ``limit`` of finalists: up to ``OVERLAP_FACTOR`` x ``limit`` finalists where their
    figures overlap, the fastest config measured in full, the leader's loader without
    workers and the persistent twins."""
    return OVERLAP_FACTOR * limit + 2 + TWINS


def most_confirmed(limit: int) -> int:
    """The most probes a confirming round of probes of their own runs for a ``limit`` of
    finalists: :func:`most_finalists` and the default loader beside them
    (:func:`autotune.decide._rounds.interleaved`)."""
    return round_length(most_finalists(limit))


def most_in_runoff() -> int:
    """The most probes a round of the runoff runs: :data:`RUNOFF` finalists and the
    default loader beside them."""
    return round_length(RUNOFF)


def persistent_twins(chosen: list[Candidate], space: Space) -> list[Settings]:
    """The same loaders with persistent workers, for the fastest finalists (up to
    :data:`TWINS`) whose workers are started anew every epoch, where the space allows it.

    Keeping the workers alive between epochs cannot slow the steady state (it costs their
    memory, which the cost order weighs), and it saves starting them at every epoch: on a
    dataset read in well under a second, that is most of the time. Exploration samples
    the knob on its own and prunes on single windows, so the twin of a leading config
    may never have been measured.
    """
    twins: list[Settings] = []
    for candidate in sorted(chosen, key=lambda c: -c.samples_per_s):
        settings = candidate.settings
        if settings.num_workers == 0 or settings.persistent_workers:
            continue
        twin = dataclasses.replace(settings, persistent_workers=True)
        if space.contains(twin):  # distinct finalists, distinct twins
            twins.append(twin)
        if len(twins) == TWINS:
            break
    return twins


def without_workers(
    leader: Candidate, bounds: Bounds | None, space: Space, tolerance: float
) -> Settings | None:
    """The leader's config loading in the training process, when the leader already
    trains within the finalist band of its compute ceiling (the model, not the loader,
    sets the pace) and the space allows it; otherwise None.

    Workers then only compete with training for the CPUs, and exploration, which
    prunes on single windows, may never have measured the same config without them.
    """
    settings = leader.settings
    if bounds is None or settings.num_workers == 0:
        return None
    ceiling = bounds.ceiling(settings)
    if ceiling is None or leader.samples_per_s < (1 - 2 * tolerance) * ceiling:
        return None
    lighter = dataclasses.replace(
        settings, num_workers=0, prefetch_factor=None, persistent_workers=False
    )
    return lighter if space.contains(lighter) else None


def measured_rounds(
    study: optuna.Study, groups: list[str], size: int
) -> list[list[Measurement | None]]:
    """The measurement at each position of a round's order, in each round
    (``[position][round]``; None where the probe failed)."""
    index = {group: i for i, group in enumerate(groups)}
    found: list[list[Measurement | None]] = [[None] * len(groups) for _ in range(size)]
    for trial in study.get_trials(deepcopy=False):
        round_index = index.get(str(trial.user_attrs.get(Attr.GROUP)))
        if round_index is None:
            continue
        record = TrialRecord.from_trial(trial)
        measurement = record.measurement
        if record.state != "COMPLETE" or record.failure is not None or measurement is None:
            continue
        # every round's trial has one
        found[trial.user_attrs[Attr.POSITION]][round_index] = measurement
    return found


def _from_exploration(
    study: optuna.Study, explored: list[Candidate], tolerance: float, user_batch: int
) -> Measurement:
    pick = cheapest_within(explored, tolerance, user_batch=user_batch)
    for record in records(study):
        measurement = record.measurement
        if (
            record.state in _MEASURED
            and record.failure is None
            and measurement is not None
            and measurement.settings == pick.settings
        ):
            return measurement
    # explored holds only configs of measured trials, so one matches
    raise ValueError(f"no measured trial of {pick.settings.describe()}")
