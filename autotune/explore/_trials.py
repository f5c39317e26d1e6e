"""Helpers on a study's trials that every backend shares: the best so far, the
windows reported as intermediate values, configs queued to run next, and trials
made directly for configs to measure now."""

from __future__ import annotations

import uuid
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.explore._backend import ExplorePlan
from autotune.probe import Figures
from autotune.settings._settings import Settings
from autotune.study._study import GROUP, OWNER, ROLE, SETTINGS, TrialRecord, owner


def report_windows(trial: optuna.Trial, figures: Figures, *, after: int = 0) -> None:
    """Report the throughput after each window (those after the first ``after``, reported
    already) as the trial's intermediate values: what the embedded backend reports live
    to its pruner, for a trial whose windows arrive some other way."""
    for step in range(after + 1, len(figures.windows) + 1):
        trial.report(Figures(windows=figures.windows[:step]).samples_per_s, step)


def best_record(study: optuna.Study, *, role: str | None = None) -> TrialRecord | None:
    """The fastest measured trial so far (complete or pruned), of ``role`` if given."""
    best: TrialRecord | None = None
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        record = TrialRecord.from_trial(trial)
        if role is not None and record.role != role:
            continue
        if record.value is not None and (best is None or record.value > (best.value or 0)):
            best = record
    return best


def enqueue(study: optuna.Study, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    """Queue a trial with fixed parameters and attributes."""
    study.enqueue_trial(params, user_attrs=attrs)


def enqueue_warm_starts(plan: ExplorePlan) -> None:
    """Queue the plan's warm-start configs, the first time a study explores."""
    if plan.study.get_trials(deepcopy=False):
        return
    for settings in plan.warm_starts:
        if plan.space.contains(settings):
            enqueue(plan.study, plan.space.params(settings), {ROLE: "explore"})


def group_attrs(settings: list[Settings], roles: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """A new group id, and the attributes of a trial for each config to measure fully."""
    group = uuid.uuid4().hex
    attrs = [
        {ROLE: role, SETTINGS: config.to_dict(), GROUP: group}
        for config, role in zip(settings, roles, strict=True)
    ]
    return group, attrs


def fixed_trial(study: optuna.Study, attrs: dict[str, Any]) -> optuna.Trial:
    """A new running trial with given attributes (a config to measure), made directly
    rather than through Optuna's queue of waiting trials: any search on the same study
    pops from that queue (a concurrent one, or this one's next stage finding a config
    its exploration queued but did not reach), so a finalist queued there could be
    measured by the wrong search or stage, and missed by the one that wanted it."""
    # Owned from the start: a search killed before the trial began leaves it abandoned.
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, user_attrs={**attrs, OWNER: owner()}
    )
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    return optuna.Trial(study, trial_id)
