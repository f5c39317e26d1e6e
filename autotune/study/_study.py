"""The study: every trial and its figures, in an Optuna SQLite storage.

State that must survive a restart lives in the storage, never on objects: a
study resumes in another process, and is read back by ``show``, ``export`` and
``autotune.load``. Everything autotune adds is a JSON user attribute:

study attributes
    ``autotune``         format, machine and workload fingerprints, space, options
    ``autotune.result``  the chosen settings with the figures that chose them
trial attributes
    ``autotune.role``      explore, baseline, confirm
    ``autotune.settings``  the whole config the trial measured
    ``autotune.figures``   its figures (windows included)
    ``autotune.failure``   why it failed
    ``autotune.backend``   who ran it: optuna (in the search's process) or ray
    ``autotune.node``      with ray: the node it ran on (hostname, Ray node id)
    ``autotune.owner``     the search process running it (host, pid, start time)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from autotune._errors import StudyError
from autotune.probe import Failure, Figures, Measurement
from autotune.settings import Settings
from autotune.study._optuna_private import (
    StaleFilteringStorage,
    backing_storage,
    id_in_storage,
    storage_of,
)

STUDY_FORMAT = 1
META = "autotune"
RESULT = "autotune.result"
ROLE = "autotune.role"
SETTINGS = "autotune.settings"
FIGURES = "autotune.figures"
FAILURE = "autotune.failure"
GROUP = "autotune.group"
POSITION = "autotune.position"
"""Trial attribute: where a confirming trial stands in its round's list of configs."""
BACKEND = "autotune.backend"
NODE = "autotune.node"
DUPLICATE_OF = "autotune.duplicate_of"
BOUNDED = "autotune.bounded"
OWNER = "autotune.owner"
PROPOSED_BY = "autotune.proposed_by"
"""Trial attribute: why autotune queued this config rather than the sampler proposing it."""
STARTS = "autotune.starts"
"""Study attribute: where each search of the study started, one entry a search, oldest first."""
WARM_START = "warm start"
"""The PROPOSED_BY of the configs a search tries first (judged from ASHA's second rung)."""

DEFAULT_DIR = Path("studies")
LOCK_TIMEOUT_SECONDS = 60.0
"""How long opening or writing a study waits while another process holds its lock."""
_SQLITE_HEADER = b"SQLite format 3\x00"
_HEARTBEAT_SECONDS = 10


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    """Silence Optuna's info lines (study created, trial finished); autotune's own
    progress replaces them."""
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def resolve(study: str | Path | None, default_name: str) -> tuple[Path, str]:
    """The file and the study name that ``--study`` means.

    A bare name means ``studies/NAME.db``; anything with a path separator or a
    ``.db`` suffix is a file, and the study inside is named after its stem.
    """
    if study is None or str(study) == "":
        name = default_name
        return DEFAULT_DIR / f"{name}.db", name
    text = str(study)
    if "/" in text or "\\" in text or text.endswith(".db"):
        path = Path(text)
        return path, path.stem
    return DEFAULT_DIR / f"{text}.db", text


def _check_file(path: Path) -> None:
    """Refuse a file that is not an Optuna study, before Optuna writes into it."""
    if path.is_dir():
        raise StudyError(f"{path} is a directory; expected a study file (.db).")
    size = path.stat().st_size
    with path.open("rb") as handle:
        header = handle.read(len(_SQLITE_HEADER))
    if size == 0 or header != _SQLITE_HEADER:
        raise StudyError(
            f"{path} is not a study: it is not an SQLite database. Nothing was written; "
            "give another --study path."
        )
    # Read only, unless a search was killed while writing: then SQLite rolls its journal
    # back on opening (the study as of its last commit), which a read-only opener cannot.
    mode = "rw" if Path(f"{path}-journal").exists() else "ro"
    try:
        uri = f"file:{path.resolve()}?mode={mode}"
        with contextlib.closing(
            sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_SECONDS)
        ) as connection:
            tables = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
    except sqlite3.OperationalError as error:
        if "locked" in str(error):
            raise StudyError(_locked(path)) from None
        raise StudyError(_corrupt(path, str(error))) from None
    except sqlite3.DatabaseError as error:
        raise StudyError(_corrupt(path, str(error))) from None
    if problems != ["ok"]:
        raise StudyError(_corrupt(path, problems[0].replace("\n", " ")))
    if "studies" not in tables or "trials" not in tables:
        raise StudyError(
            f"{path} is an SQLite database but not a study (no Optuna tables). Nothing was "
            "written; give another --study path."
        )


class _Storage(StaleFilteringStorage):
    """Optuna's RDB storage with its trial-state check-and-set made atomic across threads
    and processes: SQLite ignores ``SELECT ... FOR UPDATE``, so two trials running in
    parallel threads, or two searches on one study, could otherwise both pop the same
    enqueued trial."""

    def __init__(self, *args: Any, path: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._path = path
        self._state_lock = threading.Lock()

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        with self._state_lock, _exclusive(self._path):
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


def _corrupt(path: Path, detail: str) -> str:
    return (
        f"{path} is corrupt ({detail}). Nothing was written; restore it from a copy or give "
        "another --study path."
    )


def _locked(path: Path) -> str:
    return (
        f"{path} is locked by another process and stayed locked for "
        f"{LOCK_TIMEOUT_SECONDS:g} s; wait for that process to finish (or end it) and run "
        "again, or give another --study path. Nothing was written."
    )


def storage(path: Path, *, must_exist: bool) -> optuna.storages.RDBStorage:
    """Open (or create) the SQLite storage at ``path``.

    Raises:
        StudyError: missing (with ``must_exist``), not a study, corrupt, locked or newer.
    """
    if not path.exists():
        if must_exist:
            raise StudyError(
                f"no study at {path}; run `autotune search CONFIG --study {path}` to make one."
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path):
        existed = path.exists()
        if existed:
            _check_file(path)
        return _open_storage(path, existed=existed)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold a lock on the study's directory, across threads and processes.

    Opening a study holds it: two searches starting at once on a new study would
    both create its tables (and one fail), or one would find the file the other
    has only begun to write and refuse it as not a study. Nothing is written: the
    lock is on the directory itself (flock).
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: SQLite's own locks are all there is
        yield
        return
    handle = os.open(path.parent, os.O_RDONLY)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StudyError(_locked(path)) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(handle)  # releases the lock


def _open_storage(path: Path, *, existed: bool) -> optuna.storages.RDBStorage:
    url = f"sqlite:///{path.resolve()}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return _Storage(
                url,
                path=path,
                engine_kwargs={"connect_args": {"timeout": LOCK_TIMEOUT_SECONDS}},
                heartbeat_interval=_HEARTBEAT_SECONDS,
                grace_period=3 * _HEARTBEAT_SECONDS,
                # A study's tables exist already: opening one must not write into it
                # before its schema is known to be one this Optuna reads.
                skip_table_creation=existed,
            )
    except Exception as error:
        raise StudyError(_explain_storage_error(path, error)) from error


def _explain_storage_error(path: Path, error: Exception) -> str:
    text = str(error)
    if "locked" in text:
        return _locked(path)
    if "no longer compatible" in text:
        if "optuna storage upgrade" in text:
            return (
                f"{path} was written by an older Optuna; upgrade it with `optuna storage "
                f"upgrade --storage sqlite:///{path}` (keep a copy first). Nothing was written."
            )
        return (
            f"{path} was written by a newer Optuna than this one ({optuna.__version__}); "
            "upgrade optuna and autotune to read it. Nothing was written."
        )
    if "malformed" in text or "not a database" in text:
        return _corrupt(path, text.splitlines()[0])
    first = text.splitlines()[0] if text else type(error).__name__
    return f"{path} cannot be opened as a study: {first}"


def study_names(path: Path) -> list[str]:
    """Names of the studies in a file."""
    return [s.study_name for s in optuna.get_all_study_summaries(storage(path, must_exist=True))]


def open_study(path: Path, name: str, *, create: bool) -> optuna.Study:
    """The study ``name`` in ``path``; created when ``create`` and absent.

    A file that holds exactly one study means that one, whatever its name (a
    renamed or copied file): it is read, or continued, rather than given a second
    study.
    """
    store = storage(path, must_exist=not create)
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(store)]
        if name not in names and len(names) == 1:
            name = names[0]
        if name not in names:
            if not create:
                raise StudyError(
                    f"{path} holds no study named {name!r}; it holds {names or 'none'}."
                )
            with quiet_optuna():
                return optuna.create_study(
                    storage=store, study_name=name, direction="maximize", load_if_exists=True
                )
        return optuna.load_study(storage=store, study_name=name)
    except StudyError:
        raise
    except Exception as error:
        raise StudyError(_explain_storage_error(path, error)) from error


def read_meta(study: optuna.Study) -> dict[str, Any]:
    """The study's autotune attributes; checks the format is one this version reads."""
    meta: dict[str, Any] = dict(study.user_attrs.get(META) or {})
    fmt = meta.get("format", STUDY_FORMAT)
    if isinstance(fmt, int) and fmt > STUDY_FORMAT:
        raise StudyError(
            f"study {study.study_name!r} was written by a newer autotune (format {fmt}; this "
            f"version reads up to {STUDY_FORMAT}); upgrade autotune to read it."
        )
    return meta


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as autotune reads it back from the study.

    Its :attr:`measurement` is the one record of what was measured; this type exists
    for what only a trial has around it: its number and state, its role in the search,
    why it failed or was not run (a repeat, ruled out by the bounds), and, for a pruned
    trial, the last figure the pruner saw (``value``).
    """

    number: int
    state: str
    role: str
    settings: Settings | None
    value: float | None
    """samples/s: the final figure, or for a pruned trial its last reported one."""
    figures: Figures | None
    failure: Failure | None
    duration_s: float | None
    duplicate_of: int | None = None
    bounded: str | None = None
    """Why the trial was not run: its compute ceiling could not reach the best."""
    backend: str | None = None

    @property
    def measurement(self) -> Measurement | None:
        """The settings and figures this trial measured; None when it measured nothing."""
        if self.settings is None or self.figures is None:
            return None
        return Measurement(settings=self.settings, figures=self.figures)

    @property
    def probed(self) -> bool:
        """Whether the trial ran a probe: False for a repeat of a config already measured
        and for one ruled out without running (by its compute ceiling, or infeasible)."""
        infeasible = self.failure is not None and self.failure.kind == "infeasible"
        return self.duplicate_of is None and self.bounded is None and not infeasible

    @property
    def note(self) -> str:
        """Why a trial has no figures of its own, or how it failed; empty otherwise."""
        if self.failure is not None:
            return f"{self.failure.kind}: {self.failure.message}"
        if self.duplicate_of is not None:
            return f"same config as #{self.duplicate_of}"
        if self.bounded is not None:
            return self.bounded
        return ""

    @classmethod
    def from_trial(cls, trial: FrozenTrial) -> TrialRecord:
        attrs = trial.user_attrs
        settings = Settings.from_dict(attrs[SETTINGS]) if SETTINGS in attrs else None
        figures = Figures.from_dict(attrs[FIGURES]) if FIGURES in attrs else None
        failure = Failure.from_dict(attrs[FAILURE]) if FAILURE in attrs else None
        value: float | None = trial.value
        if value is None and trial.state == TrialState.PRUNED and trial.intermediate_values:
            value = trial.intermediate_values[max(trial.intermediate_values)]
        duration = trial.duration.total_seconds() if trial.duration is not None else None
        return cls(
            number=trial.number,
            state=trial.state.name,
            role=str(attrs.get(ROLE, "explore")),
            settings=settings,
            value=value,
            figures=figures,
            failure=failure,
            duration_s=duration,
            duplicate_of=attrs.get(DUPLICATE_OF),
            bounded=attrs.get(BOUNDED),
            backend=attrs.get(BACKEND),
        )


def records(study: optuna.Study) -> list[TrialRecord]:
    """Every trial of the study, oldest first; not the configs still queued (WAITING),
    which are proposals a later search runs first, not trials yet."""
    return [
        TrialRecord.from_trial(t)
        for t in study.get_trials(deepcopy=False)
        if t.state != TrialState.WAITING
    ]


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
    who = trial.user_attrs.get(OWNER)
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
        storage.set_trial_user_attr(id_in_storage(trial), FAILURE, failure.to_dict())
    except UpdateFinishedTrialError:
        return False  # another search ended it first
    return True


def _beating(study: optuna.Study) -> _Storage | None:
    """The study's storage if it keeps heartbeats (one autotune opened), else None."""
    storage = backing_storage(study)
    return storage if isinstance(storage, _Storage) and storage.heartbeat_interval else None


def fail_abandoned(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose search is gone, each with a note saying why.

    A search killed outright (SIGKILL, a power cut) leaves its trials RUNNING: the
    embedded search's, and the Ray driver's (it proposes and records every trial, so
    it owns them; the Ray workers only probe). On this machine the owner's process is
    checked at once; a trial owned elsewhere is failed once its heartbeat is stale
    (Optuna's rule: none for the storage's grace period; every search beats for the
    trials it runs, see :class:`Heartbeat`). Trials of a search still running (another
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


class Heartbeat:
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

    def __enter__(self) -> Heartbeat:
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
