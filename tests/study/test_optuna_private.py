"""Optuna's private API as autotune uses it: each test fails if a new Optuna behaves otherwise
(then check autotune/study/_optuna_private.py against it, and widen the pin in pyproject.toml)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.exceptions import ExperimentalWarning
from optuna.trial import TrialState

from autotune.study import (
    frozen_trial,
    id_in_storage,
    locate,
    new_trial,
    open_study,
    storage_of,
)
from autotune.study._optuna_private import StaleFilteringStorage, backing_storage


@pytest.fixture
def study(tmp_path: Path) -> optuna.Study:
    return open_study(locate(tmp_path / "s.db", None, name="s"), create=True)


def test_the_storage_and_the_trial_ids_are_the_ones_optuna_uses(study: optuna.Study) -> None:
    asked = study.ask()
    asked.report(3.0, 1)
    read = frozen_trial(study, asked)
    assert read.number == asked.number and read.intermediate_values == {1: 3.0}
    assert storage_of(study).get_trial(id_in_storage(asked)).number == asked.number
    assert id_in_storage(study.trials[0]) == id_in_storage(asked)


def test_the_opened_storage_sits_behind_optunas_cache(study: optuna.Study) -> None:
    behind = backing_storage(study)
    assert isinstance(behind, optuna.storages.RDBStorage)
    assert behind is not storage_of(study)  # the cache, which holds the opened storage
    memory = optuna.create_study()
    assert backing_storage(memory) is storage_of(memory)


def test_a_trial_made_in_the_storage_runs_with_its_attributes(study: optuna.Study) -> None:
    template = optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs={"a": 1})
    trial = new_trial(study, template)
    assert trial.user_attrs == {"a": 1}
    study.tell(trial, 2.0)
    assert [(t.state, t.value) for t in study.trials] == [(TrialState.COMPLETE, 2.0)]


class _Keeping(StaleFilteringStorage):
    """Fails only the stale trials it is told to, and remembers what Optuna asked."""

    def __init__(self, *args: object, fail: bool, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fail = fail
        self.asked: list[list[int]] = []

    def keep_stale(self, trial_ids: list[int]) -> list[int]:
        self.asked.append(list(trial_ids))
        return trial_ids if self.fail else []


@pytest.mark.parametrize("fail", [False, True])
def test_optuna_fails_the_stale_trials_the_storage_keeps(tmp_path: Path, fail: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        storage = _Keeping(
            f"sqlite:///{tmp_path / 'h.db'}", heartbeat_interval=1, grace_period=1, fail=fail
        )
    study = optuna.create_study(storage=storage)
    running = study.ask()
    storage.record_heartbeat(id_in_storage(running))
    # Past the grace period by more than a second: Optuna compares the heartbeat with
    # SQLite's CURRENT_TIMESTAMP, which has whole seconds only.
    time.sleep(2.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # what Study.optimize runs before each trial
    assert storage.asked == [[id_in_storage(running)]]
    state = study.trials[0].state
    assert state == (TrialState.FAIL if fail else TrialState.RUNNING)
    assert storage.stale_trial_ids(study) == []  # failed, or kept by the filter
    assert storage.asked[-1] == ([] if fail else [id_in_storage(running)])
