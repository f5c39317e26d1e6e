"""The rules every trial follows, piece by piece, on in-memory studies: no probe runs."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from autotune.explore._outcome import (
    Outcome,
    TrialFailed,
    probe_outcome,
    record_failure,
    record_interrupted,
)
from autotune.probe import Failure, Figures, ProbeResult, Window
from autotune.study._study import FAILURE

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
