"""The driver's side of a Ray Tune run: propose through the study, record into it.

Ray Tune runs the trials; everything that decides what a trial means happens
here, on the driver, with the rules every backend shares:

- :class:`TrialBook` keeps the Tune trials of one run and the Optuna trials
  they are, and records each ended trial into the study exactly as the
  embedded backend would (figures, failure, intermediate values), plus the
  node it ran on; it owns them (beats for them) until they are told;
- :class:`StudySearch` is Ray's OptunaSearch on the search's own study with
  the embedded backend's sampler; configs that need no probe (a repeat, one
  ruled out by an out-of-memory) are settled there and never reach Ray;
- :class:`StudyPruning` is Tune's scheduler: it prunes on the driver, from the
  study, as the embedded backend does (below); the trials it stops are PRUNED;
- :class:`StudyRecorder` hears from Tune when trials start, report and end.

Pruning is decided here rather than by Ray's ASHAScheduler, whose rungs live in
the driver's memory: a resumed search (a new driver) started them empty, and its
first trials passed every rung unjudged. Seeding that scheduler's rungs from the
study would mean writing into its private state, which Ray may change. Instead each
window a Ray worker reports is written to the study at once, as the trial's
intermediate value (what the embedded backend reports), and
:class:`~autotune.explore._rungs.StudyRungs`, the embedded backend's pruner,
judges the trial at each rung against every explored trial in the study: this
search's running ones, and those of earlier or concurrent searches on either
backend. Nothing about the rungs is kept in the driver, so nothing is lost with it.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from ray.tune import Callback
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.stopper import Stopper

from autotune.explore._backend import ExplorePlan
from autotune.explore._embedded import sampler
from autotune.explore._outcome import Outcome
from autotune.explore._ray_worker import METRIC, NUMBER_KEY, SETTINGS_KEY, TIME_ATTR
from autotune.explore._rules import TrialRules
from autotune.explore._rungs import StudyRungs
from autotune.explore._trials import fixed_trial, report_windows
from autotune.probe import Failure, Figures, ProbeResult, Window, ends_steady, steady_share
from autotune.settings import Settings
from autotune.study import Attr, TrialHeartbeats, frozen_trial, id_in_storage, storage_of


@dataclasses.dataclass
class _Running:
    """A proposed trial on its way through Ray."""

    trial: optuna.Trial
    role: str
    settings: Settings
    tune_id: str | None = None
    figures: Figures = dataclasses.field(default_factory=Figures)
    failure: Failure | None = None
    node: dict[str, Any] | None = None
    started: bool = False
    pruned: bool = False
    reported: int = 0
    """Windows reported to the study so far (as the trial's intermediate values)."""


class TrialBook:
    """The trials of one Tune run, and their recording into the study."""

    def __init__(
        self,
        plan: ExplorePlan,
        *,
        exploring: bool,
        count: int,
        timeout: float | None,
        fixed: list[dict[str, Any]] | None = None,
    ) -> None:
        self.plan = plan
        self.template = plan.template if exploring else plan.measuring()
        """What each trial's probe was asked, less its settings: how many windows end it."""
        self.fixed = list(fixed or [])
        """The attributes of the trials to run, in order, when this run measures given
        configs (the confirming rounds) rather than asking the sampler."""
        self.rules = TrialRules(plan, exploring=exploring, backend="ray")
        self.rungs = StudyRungs.of_search(plan.options)
        self.count = count
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.asked = 0
        self.stopping = False
        """No new trial: the budget is spent, or the rules ended exploration."""
        self._proposed: dict[int, _Running] = {}
        self._by_tune_id: dict[str, _Running] = {}
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)
        self._told_niceness = False
        self.heartbeat = TrialHeartbeats(plan.study)
        """The driver owns every trial it proposed until it tells the study how it ended
        (the Ray workers only probe): it beats for them, so that a driver killed on
        another machine than the next search's leaves trials that go stale."""

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its searcher, scheduler and callbacks (all holding the book) to
        # restore an experiment later; a search resumes from its study instead, and the
        # book (a study, a progress display) lives in this process only.
        return {}

    # ----------------------------------------------------------------- proposing
    def exhausted(self) -> bool:
        """Whether no more trials may be proposed in this run."""
        late = self.deadline is not None and time.monotonic() > self.deadline
        if self.rules.exploring:  # repeats and configs ruled out spend no budget
            spent = self.rules.budget_left(self.count) <= 0
        else:
            spent = self.asked >= self.count
        return self.stopping or spent or late

    def propose(self, trial: Any) -> dict[str, Any]:
        """OptunaSearch's define-by-run space: the config of one trial (``trial`` is
        Ray's wrapper around an ``optuna.Trial`` that captures what it suggests)."""
        role, settings = self.rules.begin(trial)
        self._proposed[trial.number] = _Running(trial=trial.ot_trial, role=role, settings=settings)
        self.heartbeat.add(id_in_storage(trial.ot_trial))
        return {NUMBER_KEY: trial.number, SETTINGS_KEY: settings.to_dict()}

    def settle(self, number: int) -> bool:
        """Settle a proposal that needs no probe (recorded now); False if it must run."""
        self.asked += 1
        running = self._proposed[number]
        outcome = self.rules.settled(running.trial, running.settings, running.role)
        if outcome is None:
            return False
        self._tell(running, outcome)
        return True

    def attach(self, number: int, tune_id: str) -> None:
        running = self._proposed[number]
        running.tune_id = tune_id
        self._by_tune_id[tune_id] = running

    # ----------------------------------------------------------------- from Tune
    def started(self, tune_id: str) -> None:
        running = self._by_tune_id.get(tune_id)
        if running is not None:
            running.started = True
            self.plan.progress.trial_started(running.trial.number, running.role, running.settings)

    def reported(self, tune_id: str, result: dict[str, Any]) -> None:
        running = self._by_tune_id.get(tune_id)
        if running is None or "figures" not in result:
            return
        running.figures = Figures.from_dict(result["figures"])
        running.node = result.get("node")
        self._check_niceness(running)
        if result.get("failure"):
            running.failure = Failure.from_dict(result["failure"])
            return
        if running.figures.windows:
            window: Window = running.figures.windows[-1]
            self.plan.progress.window(running.trial.number, window, running.figures.samples_per_s)

    def _check_niceness(self, running: _Running) -> None:
        """Say once that a trial probed at a lower priority than this process runs at."""
        niceness = (running.node or {}).get("niceness", self.niceness)
        if niceness <= self.niceness or self._told_niceness:
            return
        self._told_niceness = True
        self.plan.progress.message(
            f"ray: trial #{running.trial.number} ran at niceness {niceness}, above this "
            f"process's {self.niceness} (Ray starts its workers at 15, and this user may not "
            "lower it): while other processes are busy its figures read low. Start the "
            f"cluster with RAY_worker_niceness={self.niceness} in `ray start`'s environment."
        )

    def judge(self, tune_id: str, value: float, windows: int) -> bool:
        """Report a trial's new window to the study; whether the rungs stop it there
        (explored trials only: given configs are measured to the end)."""
        running = self._by_tune_id.get(tune_id)
        if running is None or windows <= running.reported:
            return False  # no new window: a failure's last result, or Tune's duplicate
        running.trial.report(value, windows)
        running.reported = windows
        if running.role != "explore":
            return False
        frozen = frozen_trial(self.plan.study, running.trial)
        running.pruned = self.rungs.prune(self.plan.study, frozen)
        return running.pruned

    def ended(self, tune_id: str, error: BaseException | None = None) -> None:
        """Record a Tune trial that ended, as the study's trial it is."""
        running = self._by_tune_id.get(tune_id)
        if running is None or running.trial.number not in self._proposed:
            return
        failure = running.failure
        if error is not None:
            failure = failure_of(error)
        if running.node is not None:
            running.trial.set_user_attr(Attr.NODE, running.node)
        report_windows(running.trial, running.figures, after=running.reported)
        windows = running.figures.windows
        request = dataclasses.replace(self.template, settings=running.settings)
        complete = len(windows) >= request.max_windows or ends_steady(
            windows, steady_share(request)
        )
        if failure is None and not complete and not running.pruned:
            message = (
                "not finished: the search ended while it ran"
                if running.started
                else "not run: the search ended before this trial started"
            )
            self._tell(running, self.rules.interrupted(running.trial, message))
            return
        result = ProbeResult(
            figures=running.figures, failure=failure, stopped=failure is None and not complete
        )
        self._tell(running, self.rules.conclude(running.trial, running.settings, result))

    def abandon(self, message: str) -> None:
        """Record every trial still open (proposed or running) as interrupted."""
        for running in list(self._proposed.values()):
            self._tell(running, self.rules.interrupted(running.trial, message))

    def reconcile(self, results: Iterable[Any]) -> None:
        """After Tune's run: record from its ResultGrid any trial the events did not end
        (with its error, or as interrupted), so no error of the grid is ever dropped; then
        any proposal that never ran."""
        for result in results:
            number = (result.config or {}).get(NUMBER_KEY)
            running = self._proposed.get(number) if number is not None else None
            if running is None or running.tune_id is None:
                continue
            self.ended(running.tune_id, error=result.error)
        self.abandon("not run: the search ended before this trial started")

    def close(self) -> None:
        """After the run (every trial told, or the search ending): beat no more."""
        self.heartbeat.stop()

    def _tell(self, running: _Running, outcome: Outcome) -> None:
        self._proposed.pop(running.trial.number, None)
        self.heartbeat.discard(id_in_storage(running.trial))
        value = outcome.value if outcome.state == TrialState.COMPLETE else None
        frozen: FrozenTrial = self.plan.study.tell(running.trial, value, state=outcome.state)
        if self.rules.after(self.plan.study, frozen):
            self.stopping = True


def failure_of(error: BaseException) -> Failure:
    """What a Tune trial's error means: a Ray worker that died (a node lost with it),
    Ray's memory monitor, or an error in Ray itself. (A probe's own failure arrives as
    its last result, not as an error.)"""
    from ray import exceptions

    cause = getattr(error, "cause", None) or error
    text = str(error).strip()
    last = text.splitlines()[-1].strip() if text else type(error).__name__
    if isinstance(cause, exceptions.OutOfMemoryError) or "memory monitor" in text:
        return Failure(
            kind="oom",
            message=f"Ray's memory monitor killed the trial's worker: {last}",
            traceback=text,
        )
    if isinstance(cause, exceptions.RayActorError | exceptions.NodeDiedError):
        return Failure(
            kind="crash", message=f"the Ray worker running the trial died: {last}", traceback=text
        )
    return Failure(kind="error", message=f"the trial failed in Ray: {last}", traceback=text)


class StudySearch(OptunaSearch):
    """Ray's OptunaSearch on the search's own study, with the embedded backend's sampler."""

    def __init__(self, book: TrialBook) -> None:
        study = book.plan.study
        super().__init__(
            space=book.propose,
            metric=METRIC,
            mode="max",
            sampler=sampler(book.plan.options.seed),
            study_name=study.study_name,
            storage=storage_of(study),  # the same storage as the search's
        )
        self.book = book

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        while not self.book.exhausted():
            with warnings.catch_warnings():
                # Trials asked outside Study.optimize get no heartbeat; the driver tells
                # every one of them before it ends, even on Ctrl-C.
                warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")
                if self.book.fixed and trial_id not in self._ot_trials:
                    # A config to measure: its trial made here, which OptunaSearch then
                    # uses instead of asking the study's queue.
                    self._ot_trials[trial_id] = fixed_trial(
                        self.book.plan.study, self.book.fixed.pop(0)
                    )
                config = super().suggest(trial_id)
            if config is None:
                return None
            number = int(config[NUMBER_KEY])
            if not self.book.settle(number):
                self.book.attach(number, trial_id)
                return config
            del self._ot_trials[trial_id]  # settled here: ask again for this Tune trial
        return Searcher.FINISHED  # type: ignore[return-value]  # Ray's annotation omits it

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Recorded by :class:`StudyRecorder` when the trial ends, every window at once."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Recorded by :class:`StudyRecorder`, which knows why the trial ended."""

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the study is the search's state."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: a search resumes from its study."""


class StudyPruning(FIFOScheduler):
    """Tune's scheduler for exploring: each window judged on the driver by the study's
    rungs (see the module's docstring); otherwise first come, first served."""

    def __init__(self, book: TrialBook) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.book = book

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        windows = int(result.get(TIME_ATTR) or 0)
        if self.book.judge(trial.trial_id, float(result[METRIC]), windows):
            return str(self.STOP)
        return str(self.CONTINUE)


class StudyRecorder(Callback):
    """Tune's events about trials, handed to the book."""

    def __init__(self, book: TrialBook) -> None:
        self.book = book

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.book.started(trial.trial_id)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        self.book.reported(trial.trial_id, result)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.book.ended(trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.book.ended(trial.trial_id, error=trial_error(trial))


class StopOnFatal(Stopper):
    """Ends every running trial once the rules found a failure every config shares."""

    def __init__(self, book: TrialBook) -> None:
        self.book = book

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.book.plan.fatal is not None


def trial_error(trial: Any) -> BaseException:
    """The exception a Tune trial ended with, read back from the file Tune wrote it to."""
    from ray import cloudpickle

    path = trial.pickled_error_file
    if path:
        try:
            with open(path, "rb") as handle:
                error = cloudpickle.load(handle)
            if isinstance(error, BaseException):
                return error
        except Exception:  # unreadable: fall back to the text Tune also wrote
            pass
    text = ""
    if trial.error_file:
        try:
            with open(trial.error_file) as handle:
                text = handle.read()
        except OSError:
            pass
    return RuntimeError(text.strip() or "the trial failed in Ray (no error was recorded)")
