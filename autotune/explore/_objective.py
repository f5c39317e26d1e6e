"""The embedded backend's objective: one trial, sampled, probed in its slot, reported
window by window to Optuna's pruner, and recorded by the shared :class:`TrialRules`."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.explore._backend import ExplorePlan
from autotune.explore._outcome import TrialFailed
from autotune.explore._rules import TrialRules
from autotune.explore._trials import fixed_trial
from autotune.probe import (
    PLACEMENT,
    Failure,
    Figures,
    ProbeResult,
    Slot,
    SlotPool,
    Window,
    run_probe,
)
from autotune.settings import Settings
from autotune.study import TrialHeartbeats, frozen_trial, id_in_storage


class Objective:
    """The function Optuna calls for each trial of the embedded backend."""

    def __init__(self, plan: ExplorePlan, *, exploring: bool = True) -> None:
        self.plan = plan
        self.template = plan.template if exploring else plan.measuring()
        """Explored trials run every window the pruner lets them; given configs end steady."""
        self.rules = TrialRules(plan, exploring=exploring, backend="optuna")
        self.pool = SlotPool(plan.slots) if plan.slots else None
        self.interrupted = threading.Event()
        """Set on Ctrl-C: running trials stop at their next window, and the search after
        them (even if the KeyboardInterrupt itself was lost)."""
        self.stopped = False
        """Set when the rules end exploration: a fatal failure, or nothing new to learn."""

    def __call__(self, trial: optuna.Trial) -> float:
        try:
            role, settings = self.rules.begin(trial)
            self.plan.progress.trial_started(trial.number, role, settings)
            outcome = self.rules.settled(trial, settings, role)
            if outcome is None:
                result = self.probe(trial, settings, prunable=role == "explore")
                outcome = self.rules.conclude(trial, settings, result)
        except KeyboardInterrupt:
            # Wherever in the trial Ctrl-C lands, the trial says why it failed.
            self.rules.interrupted(trial)
            raise
        return outcome.unwrap()

    def probe(self, trial: optuna.Trial, settings: Settings, *, prunable: bool) -> ProbeResult:
        """Probe ``settings`` for ``trial`` in a process of its own (in a slot, where there
        are slots), its windows reported to the pruner, which stops it when ``prunable``."""
        request = dataclasses.replace(self.template, settings=settings, mode="train")

        def on_window(window: Window, so_far: Figures) -> bool:
            value = so_far.samples_per_s
            trial.report(value, len(so_far.windows))
            self.plan.progress.window(trial.number, window, value)
            if self.interrupted.is_set():
                return False
            return not (prunable and trial.should_prune())

        with self._slot() as slot:
            if slot is not None:
                request = slot.apply(request)
            held = time.time()
            result = run_probe(request, on_window=on_window)
            held_until = time.time()
        if slot is not None:
            trial.set_user_attr(
                PLACEMENT,
                {
                    **slot.to_dict(),
                    "cpus_seen": result.info.get("cpus"),
                    # When the trial held its slot (epoch seconds): the trial's own
                    # start and end also span waiting for a slot and being told.
                    "held": [held, held_until],
                },
            )
        if self.interrupted.is_set() and result.failure is None:
            interrupted = Failure(kind="interrupted", message="interrupted (Ctrl-C)")
            return dataclasses.replace(result, failure=interrupted, stopped=False)
        return result

    @contextlib.contextmanager
    def _slot(self) -> Iterator[Slot | None]:
        if self.pool is None:
            yield None
            return
        with self.pool.acquire() as slot:
            yield slot

    def after(self, study: optuna.Study, frozen: FrozenTrial, *, in_loop: bool = True) -> None:
        """Optuna callback: show the trial, and stop on a failure every config shares
        (``in_loop`` false: a trial run outside ``Study.optimize``, which only
        :attr:`stopped` tells to stop).

        Raises:
            KeyboardInterrupt: Ctrl-C was pressed during the trial. Its own
                KeyboardInterrupt may never have come: Python drops an exception raised
                while a finalizer runs, the signal handler's included.
        """
        stop = self.rules.after(study, frozen)
        if self.interrupted.is_set():
            raise KeyboardInterrupt
        if stop:
            self.stopped = True
            if in_loop:
                study.stop()


def run_fixed(study: optuna.Study, objective: Objective, attrs: dict[str, Any]) -> None:
    """Run one trial with given attributes (a config to measure) as its own trial, not
    through Optuna's queue (see :func:`fixed_trial`)."""
    trial = fixed_trial(study, attrs)
    # Outside Study.optimize, so no heartbeat of Optuna's: the trial beats like those.
    with TrialHeartbeats(study) as heartbeat:
        heartbeat.add(id_in_storage(trial))
        try:
            value = objective(trial)
        except TrialFailed:
            study.tell(trial, state=TrialState.FAIL)
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED)
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        else:
            study.tell(trial, value)
    objective.after(study, frozen_trial(study, trial), in_loop=False)
