"""ASHA's rungs, read from the study: the pruner both backends decide with.

Successive halving lets a trial go on past a rung (``min_windows *
reduction_factor**k`` windows) when its throughput there is in the top
``1 / reduction_factor`` of the explored trials that reached that rung. Where the
rungs' values are kept decides what a resumed search knows of them:

- Ray's ASHAScheduler keeps them in the driver's memory: a resumed search (a new
  driver) started from empty rungs, and its first trials passed them unjudged;
- Optuna's SuccessiveHalvingPruner writes them as trial system attributes when it
  judges a trial: only trials it judged carry them, not those Ray ran, nor those of
  a study written before;
- every trial reports its throughput after each window as an intermediate value,
  whichever backend ran it (and every version of autotune did).

So the rungs are read from the intermediate values: a trial reaching a rung is
judged against every explored trial of the study that reported a value at that
rung, those of earlier (resumed) or concurrent searches on either backend and those
still running included. Nothing is kept anywhere else, so there is nothing to seed,
save or lose. Repeats (their windows are copies of another trial's) and trials that
measure given configs (confirm, baseline: never pruned) do not compete.

The decision is the one Optuna's SuccessiveHalvingPruner makes (no bootstrap, no
early-stopping rate): among the rung's values, this trial's included, the best
``len // reduction_factor`` (at least the best one) go on. A trial is judged at the
window that is a rung, once: a rung it passed is not revisited when later trials
raise the bar.

One exception: the warm starts (the configs the search tries first, chosen from the
bounds rather than sampled) are not judged at the first rung, only from the second
on. Their first window still joins the first rung's values. One window of 0.5 s on a
shared machine can read far off its config's rate, the warm starts are where the best
config is most often found, and a pruned warm start is a region the search will not
sample again; a second rung costs two more windows (the runs: ``docs/decisions.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study import WARM_START, Attr
from autotune.workload import SearchOptions


class StudyRungs(optuna.pruners.BasePruner):
    """Successive halving over the probe's windows, its rungs read from the study.

    Args:
        min_windows: the first rung, in windows.
        reduction_factor: each rung is this many times the one before, and keeps this
            share (one in ``reduction_factor``) of the trials that reach it.
        max_windows: the windows of a trial run to the end: a rung there (9 windows, at
            the defaults 1 and 3) judges nothing, as the trial has run them all. Pruned
            there, a trial measured in full would count as cut short: TPE ranks it below
            every complete trial, and the fastest config measured in full, a finalist,
            is taken among complete trials.
    """

    def __init__(self, min_windows: int, reduction_factor: int, max_windows: int) -> None:
        self.min_windows = min_windows
        self.reduction_factor = reduction_factor
        self.max_windows = max_windows

    @classmethod
    def of_search(cls, options: SearchOptions) -> StudyRungs:
        """The rungs a search's options set (``min_windows``, ``reduction_factor``,
        ``max_windows``), whichever backend runs its trials."""
        return cls(options.min_windows, options.reduction_factor, options.max_windows)

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` stops at its last reported window (a maximised throughput)."""
        step = trial.last_step
        if step is None or not self.is_rung(step):
            return False
        value = trial.intermediate_values[step]
        if math.isnan(value):
            return True
        if step >= self.max_windows:
            return False  # every window run: nothing left to save
        if step == self.min_windows and trial.user_attrs.get(Attr.PROPOSED_BY) == WARM_START:
            return False
        others = rung_values(study.get_trials(deepcopy=False), step, but=trial.number)
        return not promoted(value, others, self.reduction_factor)

    def is_rung(self, windows: int) -> bool:
        """Whether a trial is judged after ``windows`` windows."""
        rung = self.min_windows
        while rung < windows:
            rung *= self.reduction_factor
        return rung == windows


def rung_values(trials: Iterable[FrozenTrial], windows: int, *, but: int) -> list[float]:
    """The throughputs at ``windows`` windows of the explored trials, trial ``but`` aside."""
    values = []
    for trial in trials:
        if trial.number == but or trial.state == TrialState.WAITING:
            continue
        attrs = trial.user_attrs
        if attrs.get(Attr.ROLE, "explore") != "explore" or Attr.DUPLICATE_OF in attrs:
            continue
        value = trial.intermediate_values.get(windows)
        if value is not None and not math.isnan(value):
            values.append(value)
    return values


def promoted(value: float, others: list[float], reduction_factor: int) -> bool:
    """Whether ``value`` is among the best ``1 / reduction_factor`` of itself and
    ``others`` (the best one at least)."""
    competing = sorted([*others, value])
    kept = max(len(competing) // reduction_factor, 1)
    return value >= competing[-kept]
