"""The embedded backend: Optuna in this process, TPE proposing, ASHA pruning.

Trials run one at a time per slot: concurrent probes that shared cores would
corrupt each other's figures. With several slots (one per DDP rank, each its
own GPU and CPU share) as many trials run at once, in Optuna's threads, as the
ranks of a DDP run would.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

import optuna
from optuna.exceptions import ExperimentalWarning

from autotune.explore._backend import ExplorePlan
from autotune.explore._in_turns import explore_warm_starts, in_turns, measure_round
from autotune.explore._objective import Objective, run_fixed
from autotune.explore._outcome import TrialFailed
from autotune.explore._rungs import StudyRungs
from autotune.explore._trials import enqueue_warm_starts, group_attrs
from autotune.settings import Settings
from autotune.study import quiet_optuna

N_STARTUP_TRIALS = 6


def sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    """TPE over the conditional space: multivariate and grouped, because
    prefetch_factor and persistent_workers exist only with workers; its constant
    liar keeps trials running in parallel from being proposed the same config."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            multivariate=True,
            group=True,
            n_startup_trials=N_STARTUP_TRIALS,
            constant_liar=True,
        )


class EmbeddedBackend:
    """Optuna in this process."""

    name = "optuna"

    def _prepare(self, plan: ExplorePlan, *, exploring: bool) -> Objective:
        plan.study.sampler = sampler(plan.options.seed)
        # ASHA, its rungs read from the study: every trial in it competes, whichever
        # search or backend ran it (autotune.explore._rungs).
        plan.study.pruner = StudyRungs.of_search(plan.options)
        return Objective(plan, exploring=exploring)

    def explore(self, plan: ExplorePlan) -> None:
        """Propose trials until ``plan.options.trials`` of them have run a probe (repeats
        and configs ruled out spend none of the budget), the timeout passes, or the rules
        end exploration. Each round asks Optuna for no more trials than the budget left,
        so parallel slots never overshoot it."""
        objective = self._prepare(plan, exploring=True)
        enqueue_warm_starts(plan)
        deadline = None if plan.options.timeout is None else time.monotonic() + plan.options.timeout
        if not plan.slots:
            with quiet_optuna(), _interrupts(objective):
                explore_warm_starts(plan, objective, deadline)
        with quiet_optuna(), _interrupts(objective):
            while not objective.stopped:
                left = objective.rules.budget_left(plan.options.trials)
                timeout = None if deadline is None else deadline - time.monotonic()
                before = objective.rules.proposed
                if left <= 0 or (timeout is not None and timeout <= 0):
                    return
                plan.study.optimize(
                    objective,
                    n_trials=left,
                    timeout=timeout,
                    n_jobs=max(1, len(plan.slots)),
                    catch=(TrialFailed,),
                    callbacks=[objective.after],
                )
                if objective.rules.proposed == before:
                    return  # Optuna stopped on its own: nothing was proposed

    def measure(
        self,
        plan: ExplorePlan,
        settings: list[Settings],
        roles: list[str],
        rounds: int,
        *,
        first: int = 1,
    ) -> list[str]:
        objective = self._prepare(plan, exploring=False)  # once: its rules see every round
        return [
            _measure_round(plan, objective, settings, roles, number)
            for number in range(first, first + rounds)
        ]

    def in_turns(self, plan: ExplorePlan) -> bool:
        """Whether :meth:`measure` measures a round's configs in turns in one probe
        process: where trials run one at a time (:func:`in_turns`)."""
        return not plan.slots

    def close(self) -> None:
        """Nothing to release: everything ran in this process."""


def _measure_round(
    plan: ExplorePlan,
    objective: Objective,
    settings: list[Settings],
    roles: list[str],
    number: int,
) -> str:
    """Round ``number`` (from 1): every config once, in that round's order, as many at a
    time as there are slots."""
    group, attrs = group_attrs(settings, roles, number)
    jobs = max(1, min(len(plan.slots), len(settings)))
    with quiet_optuna(), _interrupts(objective):
        if in_turns(plan, settings):
            measure_round(plan, objective, attrs)
        elif jobs == 1:
            for trial_attrs in attrs:
                run_fixed(plan.study, objective, trial_attrs)
        else:
            pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="autotune-measure")
            try:
                for _ in pool.map(lambda a: run_fixed(plan.study, objective, a), attrs):
                    pass
            finally:
                pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: start no more
    return group


@contextlib.contextmanager
def _interrupts(objective: Objective) -> Iterator[None]:
    """On Ctrl-C, tell trials running in Optuna's threads to stop at their next window
    (the main thread's KeyboardInterrupt waits for them), then interrupt as usual; and
    interrupt on the way out if that KeyboardInterrupt was lost (Python drops one raised
    while a finalizer runs: :meth:`Objective.after` raises it again after the trial)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        objective.interrupted.set()
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if objective.interrupted.is_set():  # the handler's KeyboardInterrupt was lost
        raise KeyboardInterrupt
