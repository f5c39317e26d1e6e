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
from autotune.settings import Settings
from autotune.study import WARM_START, Attr, TrialRecord, new_trial, owner


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
    """Queue the plan's warm-start configs, the first time a study explores, marked as
    such (the pruner judges them from its second rung on)."""
    if plan.study.get_trials(deepcopy=False):
        return
    for settings in plan.warm_starts:
        if plan.space.contains(settings):
            attrs: dict[str, Any] = {Attr.ROLE: "explore", Attr.PROPOSED_BY: WARM_START}
            enqueue(plan.study, plan.space.params(settings), attrs)


def group_attrs(
    settings: list[Settings], roles: list[str], round_number: int
) -> tuple[str, list[dict[str, Any]]]:
    """A new group id (one confirming round), and the attributes of a trial for each
    config to measure fully, in the order to measure them: as given in odd rounds
    (counted from 1), reversed in even ones (A B C D, D C B A, A B C D, ...). Each
    trial records its config's position in ``settings`` (a config may stand there more
    than once: the default loader beside the finalists).

    Within a round of minutes the machine's speed drifts. In one order every round, the
    configs measured last would get the same share of that drift every time, and a ratio
    taken within a round would carry it. Reversed every other round, a steady drift
    favours each config in one round as much as it costs it in the next."""
    group = uuid.uuid4().hex
    attrs: list[dict[str, Any]] = [
        {
            Attr.ROLE: role,
            Attr.SETTINGS: config.to_dict(),
            Attr.GROUP: group,
            Attr.POSITION: position,
        }
        for position, (config, role) in enumerate(zip(settings, roles, strict=True))
    ]
    return group, attrs if round_number % 2 else attrs[::-1]


def fixed_trial(study: optuna.Study, attrs: dict[str, Any]) -> optuna.Trial:
    """A new running trial with given attributes (a config to measure), made directly
    rather than through Optuna's queue of waiting trials: any search on the same study
    pops from that queue (a concurrent one, or this one's next stage finding a config
    its exploration queued but did not reach), so a finalist queued there could be
    measured by the wrong search or stage, and missed by the one that wanted it."""
    # Owned from the start: a search killed before the trial began leaves it abandoned.
    template = optuna.trial.create_trial(
        state=TrialState.RUNNING, user_attrs={**attrs, Attr.OWNER: owner()}
    )
    return new_trial(study, template)
