"""The rules every trial of a search follows, whichever backend runs it (the
embedded backend's objective, or the Ray backend's driver):

- a config equal to one already measured is not measured again: its figures
  are reused (the trial says which one it repeats), and an unmeasured config is
  queued in its place (:mod:`autotune.explore._repeats`);
- a batch size that ran out of memory marks every larger batch size with the
  same AMP (the device's memory) or the same other settings (the host's)
  infeasible; they are recorded as such, not run; nor is a
  config whose batches cannot fit in /dev/shm, or whose compute ceiling cannot
  reach the best so far (:mod:`autotune.explore._ruled_out`);
- a failure is recorded with its reason and the search goes on; if the same
  failure (other than running out of memory) ends every trial of a search, the
  user's code is broken and the search stops with that one error (:mod:`autotune.explore._fatal`);
- once configs with workers have hung and none with as many delivered a batch, the
  configs with that many workers or more are ruled out: exploration samples the rest
  of the space, or stops with that error when there is none (:mod:`autotune.explore._hangs`);
- a finalist whose probe failed in one confirming round is not measured in the later
  ones: with a failed round it cannot be chosen;
- exploration ends early once more trials would learn nothing
  (:mod:`autotune.explore._early_stop`).

:class:`TrialRules` applies them at the few points where a backend hands it a
trial; how each trial ends is an ``Outcome`` (:mod:`autotune.explore._outcome`).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.explore._backend import ExplorePlan
from autotune.explore._early_stop import budget_left, exhausted, near_the_ceiling, stalled
from autotune.explore._fatal import FailureWatch
from autotune.explore._hangs import HangWatch
from autotune.explore._outcome import Outcome, probe_outcome, record_failure, record_interrupted
from autotune.explore._repeats import (
    UnmeasuredProposer,
    earlier_trial,
    measured_keys,
    reuse,
)
from autotune.explore._ruled_out import (
    OutOfMemoryRule,
    bytes_per_sample,
    free_shm_bytes,
    out_of_reach,
    shm_blocks,
)
from autotune.explore._trials import best_record
from autotune.probe import Failure, ProbeResult
from autotune.settings import Settings
from autotune.space import Space, TrialLike
from autotune.study import Attr, TrialRecord, fail_abandoned, owner


class ProposedTrial(TrialLike, Protocol):
    """What the rules need of a trial being proposed: an ``optuna.Trial``, or Ray's
    OptunaSearch wrapper around one."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...

    def set_user_attr(self, key: str, value: Any) -> None: ...


class TrialRules:
    """The rules every trial of a search follows, whichever backend runs it.

    A backend calls, for each trial: :meth:`begin` when it is proposed,
    :meth:`settled` before its probe (which it skips when that gives an outcome),
    :meth:`conclude` with the probe's result, or :meth:`interrupted` when it is cut
    short; then, once the study has been told how it ended, :meth:`after`.

    Args:
        plan: what the search explores, into which study.
        exploring: whether these trials explore (and may stop exploration early), or
            measure given configs.
        backend: who runs the probes: "optuna" (in this process) or "ray".
    """

    def __init__(self, plan: ExplorePlan, *, exploring: bool, backend: str) -> None:
        self.plan = plan
        self.exploring = exploring
        self.backend = backend
        self.failures = FailureWatch()
        self.repeats = 0
        self.proposed = 0
        """Explored trials proposed so far by this search, repeats included."""
        self.probed = 0
        """Explored trials of this search that ran (or are running) a probe."""
        self.proposer = UnmeasuredProposer(
            plan.space, plan.bounds, plan.options.tolerance, plan.options.seed
        )
        self._lock = threading.Lock()
        """Trials end in several threads when the embedded backend runs them in parallel."""
        fail_abandoned(plan.study)
        self.oom = OutOfMemoryRule.from_trials(plan.study.get_trials(deepcopy=False))
        self.hangs = HangWatch.from_study(plan.study)
        self.space: Space = plan.space
        """What exploration samples: the plan's space, less the configs ruled out as hanging."""
        self._narrow()
        self._failed_rounds: dict[str, tuple[int, str]] = {}
        """By config: the trial of the first confirming round its probe failed in, and
        that round's group."""
        self.bytes_per_sample = bytes_per_sample(plan.study.user_attrs.get(Attr.META))

    # ----------------------------------------------------------------- one trial
    def begin(self, trial: ProposedTrial) -> tuple[str, Settings]:
        """The trial's role and config: sampled when exploring, given otherwise."""
        trial.set_user_attr(Attr.OWNER, owner())
        role = str(trial.user_attrs.get(Attr.ROLE, "explore"))
        if role == "explore":
            settings = self.space.sample(trial)
            trial.set_user_attr(Attr.ROLE, role)
        else:
            settings = Settings.from_dict(trial.user_attrs[Attr.SETTINGS])
        trial.set_user_attr(Attr.SETTINGS, settings.to_dict())
        trial.set_user_attr(Attr.BACKEND, self.backend)
        return role, settings

    def settled(self, trial: optuna.Trial, settings: Settings, role: str) -> Outcome | None:
        """The outcome of a trial that needs no probe (ruled out, or a repeat); None to probe.
        An explored trial counts against the budget only when it is to be probed."""
        outcome = self._settled(trial, settings, role)
        if role == "explore":
            with self._lock:
                self.proposed += 1
                self.probed += outcome is None
        return outcome

    def budget_left(self, trials: int) -> int:
        """How many more explored trials may be proposed, of a budget of ``trials``
        probed ones (see :func:`autotune.explore._early_stop.budget_left`)."""
        with self._lock:
            return budget_left(trials, self.probed, self.proposed)

    def _settled(self, trial: optuna.Trial, settings: Settings, role: str) -> Outcome | None:
        blocked = self._blocked(settings) or self._failed_before(trial, settings, role)
        if blocked is not None:
            record_failure(trial, blocked)
            return Outcome(TrialState.FAIL, reason=blocked.message)
        if role == "explore":
            earlier = earlier_trial(
                self.plan.study.get_trials(deepcopy=False), settings, trial.number
            )
            if earlier is not None:
                return reuse(trial, earlier)
            reason = out_of_reach(
                self.plan.study, settings, self.plan.bounds, self.plan.options.tolerance
            )
            if reason is not None:
                trial.set_user_attr(Attr.BOUNDED, reason)
                return Outcome(TrialState.PRUNED, reason=reason)
        return None

    def conclude(self, trial: optuna.Trial, settings: Settings, result: ProbeResult) -> Outcome:
        """Record a probe's figures (and failure) on its trial; how the trial ends."""
        trial.set_user_attr(Attr.FIGURES, result.figures.to_dict())
        if result.failure is not None:
            record_failure(trial, result.failure)
            if result.failure.kind == "oom":
                with self._lock:
                    self.oom.add(settings, trial.number, failure=result.failure)
        return probe_outcome(result)

    @staticmethod
    def interrupted(trial: optuna.Trial, message: str = "interrupted (Ctrl-C)") -> Outcome:
        """Record a trial that was cut short by the user or by the end of the search."""
        return record_interrupted(trial, message)

    def blocked(self, trial: optuna.Trial, settings: Settings) -> Outcome | None:
        """How a trial whose config can no longer run at all ends (recorded on it): a
        config measured in turns whose process failed, about to be probed alone, may
        have been ruled out since (a hang proven meanwhile); None if it may run."""
        blocked = self._blocked(settings)
        if blocked is None:
            return None
        record_failure(trial, blocked)
        return Outcome(TrialState.FAIL, reason=blocked.message)

    def _blocked(self, settings: Settings) -> Failure | None:
        """Why ``settings`` cannot run at all; None if it may."""
        with self._lock:
            blocked = self.oom.blocks(settings)
            if blocked is None and self.hangs.found is not None:
                blocked = self.hangs.found.blocks(settings)
        # Only where the probe runs on this machine: a Ray worker elsewhere has its own
        # /dev/shm.
        if blocked is None and self.backend == "optuna":
            blocked = shm_blocks(settings, self.bytes_per_sample, free_shm_bytes())
        return blocked

    def _failed_before(self, trial: optuna.Trial, settings: Settings, role: str) -> Failure | None:
        """Why a finalist is not measured in this confirming round: it failed in an
        earlier one, and a config with a failed round is not chosen; None if it may run."""
        group = trial.user_attrs.get(Attr.GROUP)
        with self._lock:
            failed = self._failed_rounds.get(settings.key())
        if role != "confirm" or group is None or failed is None or failed[1] == group:
            return None
        return Failure(
            kind="infeasible",
            message=(
                f"not run: it failed in an earlier confirming round (trial #{failed[0]}), "
                "and a finalist with a failed round is not chosen"
            ),
        )

    def _narrow(self) -> None:
        """Sample, and queue, only configs that are not ruled out as hanging (the whole
        space when every config is)."""
        found = self.hangs.found
        narrowed = found.narrow(self.plan.space) if found is not None else None
        self.space = narrowed or self.plan.space
        self.proposer.space = self.space

    # ----------------------------------------------------------------- after each trial
    def after(self, study: optuna.Study, frozen: FrozenTrial) -> bool:
        """Show a finished trial; True when exploration must stop (a failure every config
        shares, which sets ``plan.fatal``, or nothing new left to measure)."""
        with self._lock:
            return self._after(study, frozen)

    def _after(self, study: optuna.Study, frozen: FrozenTrial) -> bool:
        record = TrialRecord.from_trial(frozen)
        self.plan.progress.trial_finished(record, best_record(study))
        self._note_failed_round(record, frozen)
        hang = self.hangs.observe(record)
        if hang is not None:
            self._narrow()
            if self.exploring and hang.narrow(self.plan.space) is None:
                self.plan.fatal = hang.nothing_left()
                return True
            self.plan.progress.message(hang.ruling(self.plan.space))
        if not self.exploring:
            return False
        fatal = self.failures.observe(record)
        # Not on the hang that has just ruled its region out: the rest of the space has
        # not failed yet.
        if fatal is not None and hang is None:
            self.plan.fatal = fatal
            return True
        known = not record.probed
        self.repeats = self.repeats + 1 if known else 0
        measured = measured_keys(study.get_trials(deepcopy=False), self.space)
        size = self.space.size()
        if known and len(measured) < size:
            self.proposer.queue(study, measured)
        tolerance, warm_starts = self.plan.options.tolerance, len(self.plan.warm_starts)
        reason = (
            exhausted(self.repeats, len(measured), size)
            or near_the_ceiling(study, self.plan.bounds, tolerance, warm_starts)
            or stalled(study, tolerance, warm_starts)
        )
        if reason is None:
            return False
        self.plan.progress.message(reason)
        return True

    def _note_failed_round(self, record: TrialRecord, frozen: FrozenTrial) -> None:
        """Remember a finalist whose probe failed in a confirming round."""
        group = frozen.user_attrs.get(Attr.GROUP)
        if (
            record.role == "confirm"
            and group is not None
            and record.settings is not None
            and record.failure is not None
            and record.probed
            and record.failure.kind != "interrupted"
        ):
            self._failed_rounds.setdefault(record.settings.key(), (record.number, str(group)))
