"""Repeats: a config already measured is not measured again.

A sampler proposes configs already measured, as TPE does once it has converged
on a small discrete space. Such a trial reuses the earlier trial's figures and
outcome (and says which trial it repeats), and an unmeasured config is queued in
its place, so that the next trial measures something new rather than repeating.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.explore._bounds import Bounds
from autotune.explore._outcome import Outcome
from autotune.explore._trials import best_record, enqueue
from autotune.settings import Settings
from autotune.space import Space
from autotune.study import Attr

_ENUMERABLE = 20_000
"""Spaces up to this many configs are enumerated to find one not measured yet."""
_MAY_PASS_ANOTHER_TIME = ("interrupted", "timeout")
"""Failures that say nothing of the config: it is measured again when proposed again."""
_SETTLED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _explored(attrs: Mapping[str, Any]) -> bool:
    return bool(attrs.get(Attr.ROLE, "explore") == "explore")


def _may_pass_another_time(attrs: Mapping[str, Any]) -> bool:
    failure = attrs.get(Attr.FAILURE) or {}
    return failure.get("kind") in _MAY_PASS_ANOTHER_TIME


def earlier_trial(
    trials: Iterable[FrozenTrial], settings: Settings, number: int
) -> FrozenTrial | None:
    """The first explored trial of ``trials``, other than trial ``number``, that settled
    ``settings`` for good; None if none did.

    Args:
        trials: the study's trials, oldest first.
        settings: the config proposed.
        number: the number of the trial proposing it.
    """
    key = settings.key()
    for trial in trials:
        if trial.state not in _SETTLED_STATES or trial.number == number:
            continue
        if not _explored(trial.user_attrs) or _may_pass_another_time(trial.user_attrs):
            continue
        stored = trial.user_attrs.get(Attr.SETTINGS)
        if stored is not None and Settings.from_dict(stored).key() == key:
            return trial
    return None


def repeat_outcome(earlier: FrozenTrial) -> Outcome:
    """How a trial repeating ``earlier`` ends: as ``earlier`` did."""
    if earlier.state == TrialState.COMPLETE and earlier.value is not None:
        return Outcome(TrialState.COMPLETE, earlier.value)
    if earlier.state == TrialState.PRUNED:
        reason = f"same config as trial #{earlier.number}, which was pruned"
        return Outcome(TrialState.PRUNED, reason=reason)
    return Outcome(TrialState.FAIL, reason=f"same config as trial #{earlier.number}, which failed")


def reuse(trial: optuna.Trial, earlier: FrozenTrial) -> Outcome:
    """Give ``trial`` the figures, failure or bound and the reported windows of
    ``earlier``, which measured the same config; how ``trial`` then ends."""
    trial.set_user_attr(Attr.DUPLICATE_OF, earlier.number)
    for attr in (Attr.FIGURES, Attr.FAILURE, Attr.BOUNDED):
        if attr in earlier.user_attrs:
            trial.set_user_attr(attr, earlier.user_attrs[attr])
    for step, value in sorted(earlier.intermediate_values.items()):
        trial.report(value, step)
    return repeat_outcome(earlier)


def measured_keys(trials: Iterable[FrozenTrial], space: Space) -> set[str]:
    """Keys of the configs of ``space`` that exploration has settled (measured, pruned,
    failed for good, or ruled out) or is measuring, among ``trials``."""
    keys = set()
    for trial in trials:
        attrs = trial.user_attrs
        if _explored(attrs) and Attr.SETTINGS in attrs and not _may_pass_another_time(attrs):
            settings = Settings.from_dict(attrs[Attr.SETTINGS])
            if space.contains(settings):
                keys.add(settings.key())
    return keys


def within_reach(
    configs: Sequence[Settings], bounds: Bounds | None, best: float | None, tolerance: float
) -> list[Settings]:
    """The ``configs`` whose compute ceiling may come within ``tolerance`` of ``best``."""
    if bounds is None or best is None:
        return list(configs)
    return [s for s in configs if bounds.rules_out(s, best, tolerance) is None]


class UnmeasuredProposer:
    """Queues an unmeasured config when the sampler proposed one already settled."""

    def __init__(
        self, space: Space, bounds: Bounds | None, tolerance: float, seed: int | None
    ) -> None:
        self.space = space
        self.bounds = bounds
        self.tolerance = tolerance
        self._rng = random.Random(seed)
        """Orders the whole space when the best config has no unmeasured neighbour; kept
        from one call to the next, so each such fallback draws a new order."""

    def candidates(self, measured: Set[str], near: Settings | None) -> list[Settings]:
        """Unmeasured neighbours of ``near`` (the best config); failing those, every
        unmeasured config of a space small enough to list, in random order."""
        unmeasured: list[Settings] = []
        if near is not None and self.space.contains(near):
            unmeasured = [s for s in self.space.neighbors(near) if s.key() not in measured]
        if not unmeasured and self.space.size() <= _ENUMERABLE:
            unmeasured = [s for s in self.space.configs() if s.key() not in measured]
            self._rng.shuffle(unmeasured)
        return unmeasured

    def queue(self, study: optuna.Study, measured: Set[str]) -> None:
        """Queue the first candidate within reach of the best explored config of
        ``study``, unless something new is queued already."""
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        best = best_record(study, role="explore")
        unmeasured = self.candidates(measured, best.settings if best is not None else None)
        best_value = best.value if best is not None else None
        unmeasured = within_reach(unmeasured, self.bounds, best_value, self.tolerance)
        if unmeasured:
            origin = f"neighbour of #{best.number}" if best is not None else "unmeasured"
            enqueue(
                study,
                self.space.params(unmeasured[0]),
                {Attr.ROLE: "explore", Attr.PROPOSED_BY: origin},
            )
