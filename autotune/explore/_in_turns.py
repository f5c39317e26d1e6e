"""Trials measured in turns: several configs in one probe process, a window of each in
turn (:mod:`autotune.probe._turns`), each config still a trial of its own in the study.

Measured in probes of their own, two configs' ratio carries the machine's drift between
the probes and the state each process happens to run in; in turns, each window of one
lies beside windows of the others in the same process, so the configs are compared far
more closely, and a process's start is paid once. Two stages measure so:

- a confirming round (:func:`measure_round`): the finalists and the default loader,
  :data:`PASSES` windows each;
- the warm starts, the configs exploration tries first (:func:`explore_warm_starts`):
  in groups of at most :data:`GROUP`, as many windows each as ASHA's second rung, where
  they would first be judged. They are exploration trials like any other: their windows
  are reported to the pruner, and the sampler learns from them.

They keep what a probe of its own guarantees where it matters: a config that fails on
its own (its dataset raises, a worker dies, it runs out of memory) fails its trial
alone and the others go on; a failure that ends the whole process (a hang, a crash, the
memory limit for all the loaders together) is no config's own, so each config it cut
short is measured again in a probe of its own, where the one to blame fails alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.explore._backend import ExplorePlan
from autotune.explore._objective import Objective
from autotune.explore._outcome import Outcome, TrialFailed
from autotune.explore._trials import fixed_trial
from autotune.probe import ProbeRequest, ProbeResult, run_probe
from autotune.settings import Settings
from autotune.study import TrialHeartbeats, frozen_trial, id_in_storage

PASSES = 4
"""Windows of each config in a confirming round measured in turns: enough passes that
each config's windows stand in both orders beside the others (two forward, two back)."""
GROUP = 6
"""The most warm starts measured in one process: each keeps its loader and its workers
alive between its turns, so more would hold the memory of that many trainings."""


def in_turns(plan: ExplorePlan, settings: Sequence[Settings]) -> bool:
    """Whether a round of ``settings`` is measured in turns: one config at a time on this
    machine (no slots side by side, as DDP ranks' trials run), and two configs or more."""
    return not plan.slots and len({s.key() for s in settings}) > 1


def turns_request(
    template: ProbeRequest, configs: Sequence[Settings], windows: int
) -> ProbeRequest:
    """The probe that measures ``configs`` in turns, ``windows`` passes."""
    return dataclasses.replace(
        template,
        mode="train",
        settings=configs[0],
        turns=tuple(configs),
        max_windows=windows,
        steady=None,
    )


def measure_round(plan: ExplorePlan, objective: Objective, attrs: list[dict[str, Any]]) -> None:
    """Run a confirming round's trials (``attrs``: each one's attributes, in the round's
    order) in one probe process in turns, :data:`PASSES` windows each."""
    study = plan.study
    trials = [fixed_trial(study, trial_attrs) for trial_attrs in attrs]
    _measure(plan, objective, trials, PASSES, prunable=False)


def explore_warm_starts(
    plan: ExplorePlan, objective: Objective, deadline: float | None = None
) -> None:
    """Run the warm starts the study has queued (a new study's first trials) in turns, in
    groups of :data:`GROUP`, as many windows each as the pruner's second rung, before the
    sampler proposes anything: each becomes an explored trial, complete at that rung.
    Stops early where the exploration rules end exploration, and starts no group after
    ``deadline`` (``time.monotonic``)."""
    options = plan.options
    windows = min(options.min_windows * options.reduction_factor, options.max_windows)
    while not objective.stopped:
        if deadline is not None and time.monotonic() >= deadline:
            return
        waiting = plan.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        left = objective.rules.budget_left(plan.options.trials)
        if not waiting or left <= 0:
            return
        with warnings.catch_warnings():
            # The trials beat by the TrialHeartbeats of _measure, as run_fixed's do.
            warnings.filterwarnings("ignore", message="Heartbeat of storage", category=UserWarning)
            trials = [plan.study.ask() for _ in range(min(len(waiting), GROUP, left))]
        _measure(plan, objective, trials, windows, prunable=True)


def _measure(
    plan: ExplorePlan,
    objective: Objective,
    trials: list[optuna.Trial],
    windows: int,
    *,
    prunable: bool,
) -> None:
    """Begin ``trials``, measure the configs among them that need a probe in turns for
    ``windows`` passes, tell each trial how it ended, then run the rules after each."""
    study = plan.study
    with TrialHeartbeats(study) as heartbeat:
        for trial in trials:
            heartbeat.add(id_in_storage(trial))
        try:
            _run(plan, objective, trials, windows, prunable=prunable)
        except BaseException:
            for trial in trials:
                if frozen_trial(study, trial).state == TrialState.RUNNING:
                    with contextlib.suppress(Exception):
                        objective.rules.interrupted(trial)
                        study.tell(trial, state=TrialState.FAIL)
            raise


def _run(
    plan: ExplorePlan,
    objective: Objective,
    trials: list[optuna.Trial],
    windows: int,
    *,
    prunable: bool,
) -> None:
    """Begin every trial, measure the configs that need a probe in turns, and tell each
    trial how it ended; a config alone, or cut short by the whole process's failure, is
    measured in a probe of its own."""
    rules = objective.rules
    pending: list[tuple[optuna.Trial, Settings]] = []
    later: list[tuple[optuna.Trial, str, Settings]] = []
    for trial in trials:
        role, settings = rules.begin(trial)
        plan.progress.trial_started(trial.number, role, settings)
        if any(settings == other for _, other in pending):
            # A repeat of a config this very process measures: it is settled once that
            # one has ended (the rules then reuse its figures).
            later.append((trial, role, settings))
            continue
        outcome = rules.settled(trial, settings, role)
        if outcome is None:
            pending.append((trial, settings))
        else:
            _end(objective, trial, outcome)
    _measure_pending(objective, pending, windows, prunable=prunable)
    for trial, role, settings in later:
        outcome = rules.settled(trial, settings, role)
        if outcome is None:
            result = objective.probe(trial, settings, prunable=prunable)
            outcome = rules.conclude(trial, settings, result)
        _end(objective, trial, outcome)


def _measure_pending(
    objective: Objective,
    pending: list[tuple[optuna.Trial, Settings]],
    windows: int,
    *,
    prunable: bool,
) -> None:
    """Measure the ``pending`` trials' configs in turns for ``windows`` passes (one
    alone, or one cut short by the whole process's failure, in a probe of its own), and
    tell each trial how it ended."""
    rules = objective.rules
    if len(pending) == 1:
        trial, settings = pending[0]
        result = objective.probe(trial, settings, prunable=prunable)
        _end(objective, trial, rules.conclude(trial, settings, result))
        return
    if not pending:
        return
    configs = [settings for _, settings in pending]
    whole = run_probe(turns_request(objective.template, configs, windows))
    for (trial, settings), part in zip(pending, whole.turns, strict=True):
        if _cut_short(part, whole):
            # Alone, unless what ended before it (a hang proven) rules its config out.
            blocked = rules.blocked(trial, settings)
            if blocked is not None:
                _end(objective, trial, blocked)
                continue
            part = objective.probe(trial, settings, prunable=prunable)
        else:
            _report(trial, part)
        _end(objective, trial, rules.conclude(trial, settings, part))


def _report(trial: optuna.Trial, part: ProbeResult) -> None:
    """Report ``part``'s throughput after each of its windows as ``trial``'s intermediate
    values, as a probe of its own reports them to the pruner: the rungs read them."""
    windows = part.figures.windows
    for step in range(1, len(windows) + 1):
        trial.report(dataclasses.replace(part.figures, windows=windows[:step]).samples_per_s, step)


def _cut_short(part: ProbeResult, whole: ProbeResult) -> bool:
    """Whether ``part`` failed only because the whole process did (its own failure is
    reported apart)."""
    return part.failure is not None and whole.failure is not None and part.failure is whole.failure


def _end(objective: Objective, trial: optuna.Trial, outcome: Outcome) -> None:
    """End ``trial`` in the study as ``outcome`` says, then run the rules after it (what
    it proves counts before the next trial of the group is probed)."""
    study = objective.plan.study
    _tell(study, trial, outcome)
    objective.after(study, frozen_trial(study, trial), in_loop=False)


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: Outcome) -> None:
    """End ``trial`` in the study as ``outcome`` says."""
    try:
        value = outcome.unwrap()
    except TrialFailed:
        study.tell(trial, state=TrialState.FAIL)
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, value)
