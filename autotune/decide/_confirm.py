"""Confirming and choosing: the finalists and the default loader measured again, side
by side, and the cheapest confirmed config within tolerance of the fastest named."""

from __future__ import annotations

import dataclasses

import optuna

from autotune._errors import WorkloadError
from autotune.decide._choose import Candidate, cheapest_within, finalists
from autotune.explore._backend import Backend, ExplorePlan
from autotune.explore._bounds import Bounds
from autotune.probe import Measurement
from autotune.progress._progress import Progress
from autotune.settings._settings import Settings
from autotune.space._space import Space
from autotune.study._study import GROUP, TrialRecord, records


@dataclasses.dataclass(frozen=True, kw_only=True)
class Confirmed:
    """What the confirming round measured, and the config chosen."""

    winner: Measurement
    finalists: tuple[Measurement, ...]
    """The finalists as re-measured (empty when none survived: the winner then comes from
    exploration figures)."""
    baseline: Measurement | None


def explored_candidates(study: optuna.Study, space: Space) -> list[Candidate]:
    """Exploration measurements of configs in the current space (pruned ones included:
    a config within noise of the best may have been pruned by one unlucky window)."""
    candidates = []
    for record in records(study):
        if (
            record.role == "explore"
            and record.state in ("COMPLETE", "PRUNED")
            and record.settings is not None
            and record.value is not None
            and space.contains(record.settings)
        ):
            candidates.append(Candidate(record.settings, record.value))
    return candidates


def confirm(
    runner: Backend,
    plan: ExplorePlan,
    explored: list[Candidate],
    baseline: Settings,
    progress: Progress,
    *,
    later: int,
) -> Confirmed:
    """Measure the finalists and the default loader again and choose."""
    tolerance = plan.options.tolerance
    chosen = finalists(explored, tolerance, plan.options.finalists)
    configs = [c.settings for c in chosen]
    lighter = without_workers(chosen[0], plan.bounds, plan.space, tolerance) if chosen else None
    if lighter is not None and lighter.key() not in {s.key() for s in configs}:
        progress.message(
            f"{configs[0].describe()} trains at the model's own ceiling: its loader "
            "without workers is confirmed beside it"
        )
        configs.append(lighter)
    progress.phase(
        "confirm",
        f"measuring {len(configs)} finalist(s) and the default loader again, side by side",
    )
    progress.plan("confirm", len(configs) + 1, None, later=later)
    group = runner.measure(plan, [*configs, baseline], ["confirm"] * len(configs) + ["baseline"])
    confirmed, baseline_measured = _group_measurements(plan.study, group)
    if confirmed:
        pick = cheapest_within(
            [Candidate(m.settings, m.samples_per_s) for m in confirmed], tolerance
        )
        winner = next(m for m in confirmed if m.settings == pick.settings)
    else:
        progress.message("no finalist survived re-measuring; choosing from exploration figures")
        winner = _from_exploration(plan.study, explored, tolerance)
    return Confirmed(winner=winner, finalists=tuple(confirmed), baseline=baseline_measured)


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


def _group_measurements(
    study: optuna.Study, group: str
) -> tuple[list[Measurement], Measurement | None]:
    confirmed: list[Measurement] = []
    baseline: Measurement | None = None
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get(GROUP) != group:
            continue
        record = TrialRecord.from_trial(trial)
        measurement = record.measurement
        if record.state != "COMPLETE" or measurement is None:
            continue
        if record.role == "baseline":
            baseline = measurement
        else:
            confirmed.append(measurement)
    return confirmed, baseline


def _from_exploration(
    study: optuna.Study, explored: list[Candidate], tolerance: float
) -> Measurement:
    pick = cheapest_within(explored, tolerance)
    for record in records(study):
        measurement = record.measurement
        if measurement is not None and measurement.settings == pick.settings:
            return measurement
    raise WorkloadError("no measured config to choose from")  # unreachable: explored has one
