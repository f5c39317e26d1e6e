"""Who runs a trial, and what becomes of a trial whose search is gone.

Every search records itself on the trials it runs (:func:`owner`) and beats for them
(:class:`TrialHeartbeats`; Optuna's ``Study.optimize`` beats for its own). A search killed
outright leaves its trials RUNNING: on the same machine its process is checked by pid, and
from any machine a trial whose heartbeat went stale is failed (:func:`fail_abandoned`),
each with a note saying why, so no trial of a killed writer stays RUNNING.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from autotune.probe import Failure
from autotune.study._attrs import Attr
from autotune.study._optuna_private import (
    StaleFilteringStorage,
    backing_storage,
    id_in_storage,
    storage_of,
)
from autotune.study._sqlite import exclusive

HEARTBEAT_SECONDS = 10
"""How often a search beats for each trial it runs; three missed beats make it stale."""


class BeatingStorage(StaleFilteringStorage):
    """Optuna's RDB storage as a search opens it: with heartbeats, its stale trials told
    why they fail, and its trial-state check-and-set atomic across threads and processes
    for an SQLite file (``path``): SQLite ignores ``SELECT ... FOR UPDATE``, so two trials
    running in parallel threads, or two searches on one study, could otherwise both pop
    the same enqueued trial. A server database (no ``path``) locks the row itself."""

    def __init__(self, *args: Any, path: Path | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._path = path
        self._state_lock = threading.Lock()

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        if self._path is None:
            return super().set_trial_state_values(trial_id, state, values)
        with self._state_lock, exclusive(self._path):
            return super().set_trial_state_values(trial_id, state, values)

    # Pickled like Optuna's own storage (Ray Tune pickles the searcher that holds it).
    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        del state["_state_lock"]
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._state_lock = threading.Lock()

    def keep_stale(self, trial_ids: list[int]) -> list[int]:
        """Optuna's stale trials (RUNNING, no heartbeat for the grace period), less those
        whose search process is alive on this machine (late, not gone: stopped with
        Ctrl-Z, or starved of CPU), each told first why it is about to fail: Optuna fails
        them without saying why, and a finished trial takes no more attributes."""
        stale = []
        for trial_id in trial_ids:
            grace = self.grace_period or 2 * (self.heartbeat_interval or 0)  # Optuna's default
            if _note_abandoned(self, self.get_trial(trial_id), grace=grace):
                stale.append(trial_id)
        return stale


@functools.cache
def owner() -> dict[str, Any]:
    """This search process, as recorded on the trials it runs."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": psutil.Process().create_time(),
    }


def _alive(who: dict[str, Any]) -> bool:
    try:
        process = psutil.Process(int(who["pid"]))
        return bool(abs(process.create_time() - float(who["started"])) < 1.0)
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _abandoned(trial: FrozenTrial, *, grace: float | None) -> Failure | None:
    """Why the RUNNING ``trial`` is abandoned; None while its search may still run it.

    Its owner (the process that proposed it and writes it: the embedded search, or the
    Ray driver) is checked by pid on this machine. Elsewhere only the heartbeat can
    tell: ``grace`` is given when it went stale (no heartbeat for that long; a trial
    that never had one, from a search that did not beat, is never taken as stale).
    """
    who = trial.user_attrs.get(Attr.OWNER)
    if isinstance(who, dict) and who.get("host") == socket.gethostname():
        if _alive(who):
            return None
        message = f"the search running it (pid {who.get('pid')}) ended before it finished"
        return Failure(kind="interrupted", message=message)
    if grace is None:
        return None
    name = (
        f"pid {who.get('pid')} on {who.get('host')}" if isinstance(who, dict) else "owner unknown"
    )
    message = (
        f"the search running it ({name}) sent no heartbeat for {grace:g} s; taken as ended "
        "(killed, or its machine lost)"
    )
    return Failure(kind="interrupted", message=message)


def _note_abandoned(
    storage: optuna.storages.BaseStorage, trial: FrozenTrial, *, grace: float | None
) -> bool:
    """Write on ``trial`` why it is abandoned, if it is; whether it was."""
    failure = _abandoned(trial, grace=grace)
    if failure is None:
        return False
    try:
        storage.set_trial_user_attr(id_in_storage(trial), Attr.FAILURE, failure.to_dict())
    except UpdateFinishedTrialError:
        return False  # another search ended it first
    return True


def _beating(study: optuna.Study) -> BeatingStorage | None:
    """The study's storage if it keeps heartbeats (one autotune opened), else None."""
    storage = backing_storage(study)
    return storage if isinstance(storage, BeatingStorage) and storage.heartbeat_interval else None


def fail_abandoned(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose search is gone, each with a note saying why.

    A search killed outright (SIGKILL, a power cut) leaves its trials RUNNING: the
    embedded search's, and the Ray driver's (it proposes and records every trial, so
    it owns them; the Ray workers only probe). On this machine the owner's process is
    checked at once; a trial owned elsewhere is failed once its heartbeat is stale
    (Optuna's rule: none for the storage's grace period; every search beats for the
    trials it runs, see :class:`TrialHeartbeats`). Trials of a search still running (another
    process on the same study) are left alone. Returns the numbers of the trials failed.
    """
    storage = storage_of(study)
    beating = _beating(study)
    stale = set(beating.stale_trial_ids(study)) if beating else set()  # noted
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if id_in_storage(trial) not in stale and not _note_abandoned(storage, trial, grace=None):
            continue
        try:
            storage.set_trial_state_values(id_in_storage(trial), state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue  # another search failed it first
        failed.append(trial.number)
    return failed


class TrialHeartbeats:
    """Heartbeats for the trials this process runs outside ``Study.optimize`` (which
    beats for its own): the Ray driver's, and configs measured directly. A trial
    without one whose search dies on another machine would stay RUNNING for ever: its
    heartbeat going stale is all another machine can see (:func:`fail_abandoned`).

    One thread beats for every trial added, until it is discarded; nothing happens on a
    storage without heartbeats (an in-memory study).
    """

    def __init__(self, study: optuna.Study) -> None:
        self._storage = _beating(study)
        self._interval = float(self._storage.heartbeat_interval or 0) if self._storage else 0.0
        self._trials: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TrialHeartbeats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, trial_id: int) -> None:
        """Beat for ``trial_id`` from now (the first beat at once) until discarded."""
        if self._storage is None:
            return
        self._storage.record_heartbeat(trial_id)
        with self._lock:
            self._trials.add(trial_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, name="autotune-heartbeat", daemon=True
                )
                self._thread.start()

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._trials.discard(trial_id)

    def stop(self) -> None:
        """Beat no more (the trials are all told, or the search is ending)."""
        self._stop.set()
        if self._thread is not None:
            # Not for ever: a beat may be waiting for a locked study, and the thread is a
            # daemon.
            self._thread.join(timeout=5)

    def _beat(self) -> None:
        assert self._storage is not None
        while not self._stop.wait(self._interval):
            with self._lock:
                trials = sorted(self._trials)
            for trial_id in trials:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception:  # a study locked too long: the next beat may pass
                    continue
