"""The rules every trial follows, piece by piece, on in-memory studies: no probe runs."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from autotune.explore import _ruled_out as ruled_out
from autotune.explore._bounds import Bounds, compute_key
from autotune.explore._outcome import (
    Outcome,
    TrialFailed,
    probe_outcome,
    record_failure,
    record_interrupted,
)
from autotune.explore._ruled_out import (
    OutOfMemoryRule,
    bytes_per_sample,
    free_shm_bytes,
    out_of_reach,
    shm_blocks,
)
from autotune.probe import Failure, Figures, ProbeResult, Window
from autotune.settings._settings import Settings
from autotune.study._study import FAILURE, ROLE, SETTINGS

optuna.logging.set_verbosity(optuna.logging.ERROR)


def figures(*samples: int) -> Figures:
    """Figures of one-second windows that trained ``samples`` each."""
    return Figures(
        windows=tuple(
            Window(index=i, seconds=1.0, samples=n, fresh=n, steps=1, wait_seconds=0.0)
            for i, n in enumerate(samples)
        )
    )


def new_trial() -> optuna.Trial:
    return optuna.create_study(direction="maximize").ask()


# ------------------------------------------------------------------ outcomes
def test_a_probe_that_ran_to_the_end_completes_with_its_throughput() -> None:
    outcome = probe_outcome(ProbeResult(figures=figures(100, 300)))
    assert outcome == Outcome(TrialState.COMPLETE, 200.0)
    assert outcome.unwrap() == 200.0


def test_a_probe_the_pruner_stopped_is_pruned_after_its_windows() -> None:
    outcome = probe_outcome(ProbeResult(figures=figures(100, 100), stopped=True))
    assert outcome == Outcome(TrialState.PRUNED, reason="pruned after 2 windows")
    with pytest.raises(optuna.TrialPruned, match="pruned after 2 windows"):
        outcome.unwrap()


def test_a_failed_probe_fails_with_its_message_even_when_stopped() -> None:
    failure = Failure(kind="oom", message="out of memory")
    outcome = probe_outcome(ProbeResult(figures=figures(100), failure=failure, stopped=True))
    assert outcome == Outcome(TrialState.FAIL, reason="out of memory")
    with pytest.raises(TrialFailed, match="out of memory"):
        outcome.unwrap()


def test_a_complete_outcome_without_a_value_is_a_failure() -> None:
    with pytest.raises(TrialFailed):
        Outcome(TrialState.COMPLETE).unwrap()


def test_a_failure_keeps_only_the_end_of_a_long_traceback() -> None:
    trial = new_trial()
    record_failure(trial, Failure(kind="error", message="boom", traceback="a" * 5 + "b" * 20_000))
    assert trial.user_attrs[FAILURE]["traceback"] == "b" * 20_000
    short = new_trial()
    record_failure(short, Failure(kind="error", message="boom", traceback="tb"))
    assert short.user_attrs[FAILURE] == {
        "kind": "error",
        "message": "boom",
        "piece": None,
        "traceback": "tb",
    }


def test_an_interrupted_trial_says_why_and_fails() -> None:
    trial = new_trial()
    outcome = record_interrupted(trial, "not run: the search ended")
    assert outcome == Outcome(TrialState.FAIL, reason="not run: the search ended")
    assert trial.user_attrs[FAILURE]["kind"] == "interrupted"
    assert trial.user_attrs[FAILURE]["message"] == "not run: the search ended"


# ------------------------------------------------------------------ ruled out before running
def add_trial(
    study: optuna.Study,
    settings: Settings | None = None,
    *,
    state: TrialState = TrialState.COMPLETE,
    value: float | None = None,
    role: str = "explore",
    failure: Failure | None = None,
    steps: dict[int, float] | None = None,
    **attrs: Any,
) -> FrozenTrial:
    """Add a finished trial as autotune would have recorded it; returns it."""
    user_attrs: dict[str, Any] = {ROLE: role, **attrs}
    if settings is not None:
        user_attrs[SETTINGS] = settings.to_dict()
    if failure is not None:
        user_attrs[FAILURE] = failure.to_dict()
    study.add_trial(
        optuna.trial.create_trial(
            state=state, value=value, user_attrs=user_attrs, intermediate_values=steps or {}
        )
    )
    return study.get_trials(deepcopy=False)[-1]


OOM = Failure(kind="oom", message="out of memory")


def test_out_of_memory_blocks_that_batch_and_larger_ones_with_the_same_settings() -> None:
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32, num_workers=1), number=4)
    same = rule.blocks(Settings(batch_size=32, num_workers=1))
    assert same == Failure(
        kind="infeasible",
        message="not run: batch 32 ran out of memory with the same settings in trial #4",
    )
    larger = rule.blocks(Settings(batch_size=64, num_workers=1))
    assert larger is not None and larger.message == (
        "not run: batch 64 > batch 32, which ran out of memory with the same settings in trial #4"
    )
    assert rule.blocks(Settings(batch_size=16, num_workers=1)) is None
    assert rule.blocks(Settings(batch_size=64, num_workers=2)) is None


def test_out_of_memory_remembers_the_smallest_batch_that_failed() -> None:
    rule = OutOfMemoryRule()
    rule.add(Settings(batch_size=32), number=4)
    rule.add(Settings(batch_size=64), number=9)  # larger: changes nothing
    rule.add(Settings(batch_size=16), number=7)
    blocked = rule.blocks(Settings(batch_size=16))
    assert blocked is not None and blocked.message.endswith("in trial #7")
    assert rule.blocks(Settings(batch_size=8)) is None


def test_out_of_memory_is_read_back_from_the_trials_of_a_resumed_study() -> None:
    study = optuna.create_study()
    add_trial(study, Settings(batch_size=8), value=100.0)
    add_trial(study, Settings(batch_size=32), state=TrialState.FAIL, failure=OOM)
    error = Failure(kind="error", message="boom")
    add_trial(study, Settings(batch_size=16), state=TrialState.FAIL, failure=error)
    add_trial(study, state=TrialState.FAIL, failure=OOM)  # no settings: nothing to learn
    rule = OutOfMemoryRule.from_trials(study.get_trials(deepcopy=False))
    blocked = rule.blocks(Settings(batch_size=64))
    assert blocked is not None and blocked.message.endswith("in trial #1")
    assert rule.blocks(Settings(batch_size=16)) is None


def test_bytes_per_sample_come_from_the_preflight_s_batch() -> None:
    assert bytes_per_sample({"workload": {"batch_bytes": 800, "batch_samples": 8}}) == 100.0
    assert bytes_per_sample({"workload": {"batch_bytes": None, "batch_samples": 8}}) == 0.0
    assert bytes_per_sample({"workload": {"batch_bytes": 800, "batch_samples": 0}}) == 0.0
    assert bytes_per_sample({"workload": {}}) == 0.0
    assert bytes_per_sample(None) == 0.0


def test_batches_in_flight_must_fit_in_the_free_shared_memory() -> None:
    mib = 2**20
    # 2 workers x prefetch 2, + 1: five batches of 2 MiB.
    settings = Settings(batch_size=2, num_workers=2, prefetch_factor=2)
    assert shm_blocks(settings, per_sample=mib, free_bytes=10 * mib) is None
    short = shm_blocks(settings, per_sample=mib, free_bytes=10 * mib - 1)
    assert short is not None and short.kind == "shm"
    assert short.message.startswith("not run: 5 batches in flight")
    assert shm_blocks(settings, per_sample=mib, free_bytes=None) is None
    assert shm_blocks(Settings(batch_size=2), per_sample=mib, free_bytes=0) is None


def test_free_shared_memory_is_none_where_there_is_none(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(ruled_out, "SHM_DIR", str(tmp_path))
    free = free_shm_bytes()
    assert isinstance(free, int) and free >= 0
    monkeypatch.setattr(ruled_out, "SHM_DIR", str(tmp_path / "missing"))
    assert free_shm_bytes() is None


def test_a_config_out_of_reach_of_the_best_explored_one_is_ruled_out() -> None:
    small, large = Settings(batch_size=4), Settings(batch_size=64)
    bounds = Bounds({compute_key(small): 400.0, compute_key(large): 6400.0})
    study = optuna.create_study(direction="maximize")
    assert out_of_reach(study, small, bounds, tolerance=0.03) is None  # no best yet
    add_trial(study, large, value=6000.0, role="confirm")
    assert out_of_reach(study, small, bounds, tolerance=0.03) is None  # not explored
    add_trial(study, large, value=6000.0)
    reason = out_of_reach(study, small, bounds, tolerance=0.03)
    assert reason is not None and reason.startswith("not run: the model alone trains 400")
    assert out_of_reach(study, large, bounds, tolerance=0.03) is None
    assert out_of_reach(study, small, None, tolerance=0.03) is None
