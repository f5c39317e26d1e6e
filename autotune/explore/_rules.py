"""The rules every trial of a search follows, whichever backend runs it (the
embedded backend's objective, or the Ray backend's driver):

- a config equal to one already measured is not measured again: its figures
  are reused (the trial says which one it repeats), and an unmeasured config is
  queued in its place;
- a batch size that ran out of memory marks every larger batch size with the
  same other settings infeasible; they are recorded as such, not run;
- a config whose compute ceiling cannot reach the best so far is not run;
- a failure is recorded with its reason and the search goes on; if the same
  failure ends every trial of a search, the user's code is broken and the
  search stops with that one error.
"""

from __future__ import annotations

import random
import re
import threading
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune._format import format_rate
from autotune.explore._backend import ExplorePlan
from autotune.explore._outcome import Outcome, probe_outcome, record_failure, record_interrupted
from autotune.explore._ruled_out import (
    OutOfMemoryRule,
    bytes_per_sample,
    free_shm_bytes,
    out_of_reach,
    shm_blocks,
)
from autotune.explore._trials import best_record, enqueue
from autotune.probe import Failure, ProbeResult
from autotune.settings._settings import Settings
from autotune.space._space import TrialLike
from autotune.study._study import (
    BACKEND,
    BOUNDED,
    DUPLICATE_OF,
    FAILURE,
    FIGURES,
    META,
    OWNER,
    ROLE,
    SETTINGS,
    TrialRecord,
    fail_abandoned,
    owner,
)

FATAL_REPEATS = 3
"""Identical failures, with no success, after which a search stops."""
MAX_REPEATS = 10
"""Proposals in a row of configs already measured, after which exploration stops."""
_NOT_THE_USERS_FAULT = ("infeasible", "interrupted")
_ENUMERABLE = 20_000
"""Spaces up to this many configs are enumerated to find one not measured yet."""
PROPOSED_BY = "autotune.proposed_by"
"""Trial attribute: why autotune queued this config instead of the sampler's proposal."""


def failure_signature(failure: Failure) -> str:
    """Equal for one error met in different configs (indices and pids differ)."""
    return re.sub(r"\d+", "#", failure.signature())


class ProposedTrial(TrialLike, Protocol):
    """What the rules need of a trial being proposed: an ``optuna.Trial``, or Ray's
    OptunaSearch wrapper around one."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...

    def set_user_attr(self, key: str, value: Any) -> None: ...


class TrialRules:
    """The rules every trial of a search follows, whichever backend runs it."""

    def __init__(self, plan: ExplorePlan, *, exploring: bool, backend: str) -> None:
        self.plan = plan
        self.exploring = exploring
        self.backend = backend
        self.failures: list[Failure] = []
        self.successes = 0
        self.repeats = 0
        self._rng = random.Random(plan.options.seed)
        self._lock = threading.Lock()
        """Trials end in several threads when the embedded backend runs them in parallel."""
        fail_abandoned(plan.study)
        self.oom = OutOfMemoryRule.from_trials(plan.study.get_trials(deepcopy=False))
        self.bytes_per_sample = bytes_per_sample(plan.study.user_attrs.get(META))

    # ----------------------------------------------------------------- one trial
    def begin(self, trial: ProposedTrial) -> tuple[str, Settings]:
        """The trial's role and config: sampled when exploring, given otherwise."""
        trial.set_user_attr(OWNER, owner())
        role = str(trial.user_attrs.get(ROLE, "explore"))
        if role == "explore":
            settings = self.plan.space.sample(trial)
            trial.set_user_attr(ROLE, role)
        else:
            settings = Settings.from_dict(trial.user_attrs[SETTINGS])
        trial.set_user_attr(SETTINGS, settings.to_dict())
        trial.set_user_attr(BACKEND, self.backend)
        return role, settings

    def settled(self, trial: optuna.Trial, settings: Settings, role: str) -> Outcome | None:
        """The outcome of a trial that needs no probe (ruled out, or a repeat); None to probe."""
        blocked = self._blocked(settings)
        if blocked is not None:
            record_failure(trial, blocked)
            return Outcome(TrialState.FAIL, reason=blocked.message)
        if role == "explore":
            earlier = self._earlier(settings, trial.number)
            if earlier is not None:
                return self._repeat(trial, earlier)
            reason = out_of_reach(
                self.plan.study, settings, self.plan.bounds, self.plan.options.tolerance
            )
            if reason is not None:
                trial.set_user_attr(BOUNDED, reason)
                return Outcome(TrialState.PRUNED, reason=reason)
        return None

    def conclude(self, trial: optuna.Trial, settings: Settings, result: ProbeResult) -> Outcome:
        """Record a probe's figures (and failure) on its trial; how the trial ends."""
        trial.set_user_attr(FIGURES, result.figures.to_dict())
        if result.failure is not None:
            record_failure(trial, result.failure)
            if result.failure.kind == "oom":
                with self._lock:
                    self.oom.add(settings, trial.number)
        return probe_outcome(result)

    @staticmethod
    def interrupted(trial: optuna.Trial, message: str = "interrupted (Ctrl-C)") -> Outcome:
        """Record a trial that was cut short by the user or by the end of the search."""
        return record_interrupted(trial, message)

    def _blocked(self, settings: Settings) -> Failure | None:
        """Why ``settings`` cannot run at all; None if it may."""
        with self._lock:
            blocked = self.oom.blocks(settings)
        # Only where the probe runs on this machine: a Ray worker elsewhere has its own
        # /dev/shm.
        if blocked is None and self.backend == "optuna":
            blocked = shm_blocks(settings, self.bytes_per_sample, free_shm_bytes())
        return blocked

    # ----------------------------------------------------------------- repeats
    def _earlier(self, settings: Settings, number: int) -> FrozenTrial | None:
        key = settings.key()
        for trial in self.plan.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        ):
            if trial.number == number or trial.user_attrs.get(ROLE, "explore") != "explore":
                continue
            failure = trial.user_attrs.get(FAILURE)
            if failure and failure.get("kind") in ("interrupted", "timeout"):
                continue  # may pass another time
            stored = trial.user_attrs.get(SETTINGS)
            if stored is not None and Settings.from_dict(stored).key() == key:
                return trial
        return None

    @staticmethod
    def _repeat(trial: optuna.Trial, earlier: FrozenTrial) -> Outcome:
        """Reuse an earlier trial's outcome for the same config."""
        trial.set_user_attr(DUPLICATE_OF, earlier.number)
        for attr in (FIGURES, FAILURE, BOUNDED):
            if attr in earlier.user_attrs:
                trial.set_user_attr(attr, earlier.user_attrs[attr])
        for step, value in sorted(earlier.intermediate_values.items()):
            trial.report(value, step)
        if earlier.state == TrialState.COMPLETE and earlier.value is not None:
            return Outcome(TrialState.COMPLETE, earlier.value)
        if earlier.state == TrialState.PRUNED:
            reason = f"same config as trial #{earlier.number}, which was pruned"
            return Outcome(TrialState.PRUNED, reason=reason)
        return Outcome(
            TrialState.FAIL, reason=f"same config as trial #{earlier.number}, which failed"
        )

    # ----------------------------------------------------------------- after each trial
    def after(self, study: optuna.Study, frozen: FrozenTrial) -> bool:
        """Show a finished trial; True when exploration must stop (a failure every config
        shares, which sets ``plan.fatal``, or nothing new left to measure)."""
        with self._lock:
            return self._after(study, frozen)

    def _after(self, study: optuna.Study, frozen: FrozenTrial) -> bool:
        record = TrialRecord.from_trial(frozen)
        self.plan.progress.trial_finished(record, best_record(study))
        if not self.exploring:
            return False
        if record.state in ("COMPLETE", "PRUNED"):
            self.successes += 1
        elif (
            record.failure is not None
            and record.failure.kind not in _NOT_THE_USERS_FAULT
            and record.duplicate_of is None
        ):
            self.failures.append(record.failure)
        if self.successes == 0 and len(self.failures) >= FATAL_REPEATS:
            signatures = {failure_signature(f) for f in self.failures}
            if len(signatures) == 1:
                self.plan.fatal = self.failures[0]
                return True
        known = (
            record.duplicate_of is not None
            or record.bounded is not None
            or (record.failure is not None and record.failure.kind == "infeasible")
        )
        self.repeats = self.repeats + 1 if known else 0
        measured = self._measured(study)
        if known and len(measured) < self.plan.space.size():
            self._propose_unmeasured(study, measured)
        if self.repeats >= MAX_REPEATS or len(measured) >= self.plan.space.size():
            self.plan.progress.message(
                "every config of the space has been measured; exploration ends early"
                if self.repeats < MAX_REPEATS
                else f"the sampler proposed {self.repeats} measured configs in a row; "
                "exploration ends early"
            )
            return True
        return self._near_the_ceiling(study)

    def _near_the_ceiling(self, study: optuna.Study) -> bool:
        """Whether the best config is within the finalist band of the highest compute
        ceiling (after the warm starts have run): no config can do much better."""
        bounds = self.plan.bounds
        if bounds is None:
            return False
        best = best_record(study, role="explore")
        if best is None or not bounds.saturated(best.value, self.plan.options.tolerance):
            return False
        probed = sum(
            1
            for t in study.get_trials(
                deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)
            )
            if t.user_attrs.get(ROLE, "explore") == "explore"
            and DUPLICATE_OF not in t.user_attrs
            and BOUNDED not in t.user_attrs
        )
        if probed < len(self.plan.warm_starts):
            return False
        self.plan.progress.message(
            f"the best config trains {format_rate(best.value)} samples/s, within "
            f"{2 * self.plan.options.tolerance:.0%} of the most the model trains with no "
            f"loader at all ({format_rate(bounds.highest)}): exploration ends early"
        )
        return True

    def _measured(self, study: optuna.Study) -> set[str]:
        """Keys of the space's configs that exploration has settled (measured, pruned,
        failed for good, or ruled out)."""
        keys = set()
        for trial in study.get_trials(deepcopy=False):
            if trial.user_attrs.get(ROLE, "explore") == "explore" and SETTINGS in trial.user_attrs:
                failure = trial.user_attrs.get(FAILURE) or {}
                if failure.get("kind") not in ("interrupted", "timeout"):
                    settings = Settings.from_dict(trial.user_attrs[SETTINGS])
                    if self.plan.space.contains(settings):
                        keys.add(settings.key())
        return keys

    def _propose_unmeasured(self, study: optuna.Study, measured: set[str]) -> None:
        """The sampler proposed a config already settled, as TPE does once it has
        converged on a small discrete space: queue instead an unmeasured neighbour of
        the best config (or, failing that, any unmeasured config), so the next trial
        measures something new rather than repeating."""
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return  # something new is queued already
        space = self.plan.space
        best = best_record(study, role="explore")
        fresh: list[Settings] = []
        if best is not None and best.settings is not None and space.contains(best.settings):
            fresh = [s for s in space.neighbors(best.settings) if s.key() not in measured]
        if not fresh and space.size() <= _ENUMERABLE:
            fresh = [s for s in space.configs() if s.key() not in measured]
            self._rng.shuffle(fresh)
        bounds = self.plan.bounds
        if bounds is not None and best is not None:
            tolerance = self.plan.options.tolerance
            fresh = [s for s in fresh if bounds.rules_out(s, best.value, tolerance) is None]
        if fresh:
            origin = f"neighbour of #{best.number}" if best is not None else "unmeasured"
            enqueue(study, space.params(fresh[0]), {ROLE: "explore", PROPOSED_BY: origin})
