"""Every use of Optuna's private API, in one module.

Optuna has no public way to reach a study's storage, a trial's id in that storage, or the
storage's stale trials, and the search needs all three: to make a trial outside Optuna's
queue, to read a trial back while it runs, to hand Ray Tune the same storage, and to say
why a stale trial fails before Optuna fails it. These helpers are checked against the
Optuna versions that ``pyproject.toml`` allows, and ``tests/study/test_optuna_private.py`` fails
when one of them behaves otherwise under a new Optuna.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage ``study`` reads and writes (Optuna's cache in front of an RDB storage)."""
    return study._storage


def backing_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage behind Optuna's cache, the one that was opened (itself without a cache)."""
    storage = study._storage
    return getattr(storage, "_backend", storage)


def id_in_storage(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (not its number, which counts within the study)."""
    return trial._trial_id


def new_trial(study: optuna.Study, template: FrozenTrial) -> optuna.Trial:
    """A new trial of ``study`` made from ``template`` (its state and attributes), straight
    in the storage rather than through Optuna's queue of waiting trials."""
    made = study._storage.create_new_trial(study._study_id, template_trial=template)
    return optuna.Trial(study, made)


def frozen_trial(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """``trial`` as the storage holds it now (its reports and attributes so far)."""
    return study._storage.get_trial(trial._trial_id)


class StaleFilteringStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose stale trials pass through :meth:`keep_stale`.

    Optuna fails the RUNNING trials without a heartbeat for the grace period (in
    ``Study.optimize``, before each trial) through the storage's private
    ``_get_stale_trial_ids``; overriding it is the only way to leave some alone, or to
    write on them why, before a finished trial takes no more attributes.
    """

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self.keep_stale(super()._get_stale_trial_ids(study_id))

    def keep_stale(self, trial_ids: list[int]) -> list[int]:
        """Of Optuna's stale trials, the ids to fail; all of them unless overridden."""
        return trial_ids

    def stale_trial_ids(self, study: optuna.Study) -> list[int]:
        """The ids of the trials of ``study`` Optuna would fail as stale now, filtered."""
        return self._get_stale_trial_ids(study._study_id)
