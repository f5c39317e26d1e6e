"""How a trial ends: its :class:`Outcome` (state, value, reason), what a probe's result
means as one, and how a failure is written on the trial."""

from __future__ import annotations

import dataclasses

import optuna
from optuna.trial import TrialState

from autotune.probe import Failure, ProbeResult
from autotune.study import Attr

_MAX_TRACEBACK = 20_000
"""Characters of a failure's traceback kept on its trial: the end, where the error is."""


class TrialFailed(Exception):
    """A probe failed; the trial is recorded as FAIL with the reason."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a trial ends: its state, its value (samples/s) when complete, and why."""

    state: TrialState
    value: float | None = None
    reason: str = ""

    def unwrap(self) -> float:
        """The value for Optuna's ``optimize``; raises what ends the trial otherwise.

        Raises:
            optuna.TrialPruned: the trial was pruned.
            TrialFailed: the trial failed.
        """
        if self.state == TrialState.COMPLETE and self.value is not None:
            return self.value
        if self.state == TrialState.PRUNED:
            raise optuna.TrialPruned(self.reason)
        raise TrialFailed(self.reason)


def probe_outcome(result: ProbeResult) -> Outcome:
    """How a trial whose probe ran ends: failed, stopped by the pruner, or complete."""
    if result.failure is not None:
        return Outcome(TrialState.FAIL, reason=result.failure.message)
    if result.stopped:
        windows = len(result.figures.windows)
        return Outcome(TrialState.PRUNED, reason=f"pruned after {windows} windows")
    return Outcome(TrialState.COMPLETE, result.figures.samples_per_s)


def record_failure(trial: optuna.Trial, failure: Failure) -> None:
    """Write ``failure`` on ``trial``, with only the end of its traceback: every trial
    keeps its own copy in the study, and the error is at the end."""
    data = failure.to_dict()
    if data.get("traceback"):
        data["traceback"] = data["traceback"][-_MAX_TRACEBACK:]
    trial.set_user_attr(Attr.FAILURE, data)


def record_interrupted(trial: optuna.Trial, message: str) -> Outcome:
    """Write on ``trial`` that it was cut short, and end it as failed with ``message``."""
    record_failure(trial, Failure(kind="interrupted", message=message))
    return Outcome(TrialState.FAIL, reason=message)
