"""Opening a study's storage, an SQLite file or a database server, and saying in one line
why it cannot be opened or written.

A file is checked before Optuna touches it (:mod:`autotune.study._sqlite`); a database is
reached and its tables listed before Optuna writes its own, so a wrong URL, password or
server writes nothing. Both are opened with heartbeats, so a trial whose writer was killed
is failed rather than left RUNNING.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning

from autotune._errors import StudyError
from autotune.study import _sqlite
from autotune.study._liveness import HEARTBEAT_SECONDS, BeatingStorage
from autotune.study._location import StudyLocation, missing_driver

CONNECT_TIMEOUT_SECONDS = 10
"""How long reaching a database server may take before it counts as unreachable."""
_OPTUNA_TABLES = ("studies", "trials")


def open_storage(location: StudyLocation, *, must_exist: bool) -> BeatingStorage:
    """Open (or create, unless ``must_exist``) the storage at ``location``.

    Raises:
        StudyError: missing (with ``must_exist``), not a study, corrupt, locked, written
            by a newer Optuna, unreachable, refused, or without its driver installed.
    """
    if location.path is not None:
        return _file_storage(location, must_exist=must_exist)
    return _database_storage(location, must_exist=must_exist)


def _file_storage(location: StudyLocation, *, must_exist: bool) -> BeatingStorage:
    path = location.path
    assert path is not None
    if not path.exists():
        if must_exist:
            raise StudyError(
                f"no study at {path}; run `autotune search CONFIG --study {path}` to make one."
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    with _sqlite.exclusive(path):
        existed = path.exists()
        if existed:
            _sqlite.check_file(path)
        else:  # a new study is kept in WAL mode; an older file keeps the journal it has
            _sqlite.use_wal(path)
        timeout = {"connect_args": {"timeout": _sqlite.LOCK_TIMEOUT_SECONDS}}
        storage = _open(location, engine_kwargs=timeout, existed=existed)
    _sqlite.refuse_when_locked(storage.engine, path)
    return storage


def _database_storage(location: StudyLocation, *, must_exist: bool) -> BeatingStorage:
    problem = missing_driver(location)
    if problem is not None:
        raise StudyError(f"--study {location}: {problem}. Nothing was written.")
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if location.dialect == "postgresql":
        engine_kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    import sqlalchemy

    engine = sqlalchemy.create_engine(location.storage_url, **engine_kwargs)
    try:
        existed = _has_tables(location, engine)
        if must_exist and not existed:
            raise StudyError(
                f"{location} holds no study (no Optuna tables); run `autotune search CONFIG "
                f"--study {location}` to make one."
            )
        if existed:
            return _open(location, engine_kwargs=engine_kwargs, existed=True)
        with _schema_lock(location, engine) as connection:
            # Another search may have made the tables while this one waited for the lock.
            existed = _has_tables(location, connection)
            return _open(location, engine_kwargs=engine_kwargs, existed=existed)
    finally:
        engine.dispose()


def _has_tables(location: StudyLocation, bind: Any) -> bool:
    """Whether the database holds Optuna's tables, asked before Optuna does, which would
    create its tables in a database it cannot then use, or fail with a traceback."""
    import sqlalchemy

    try:
        tables = set(sqlalchemy.inspect(bind).get_table_names())
    except Exception as error:
        raise StudyError(explain(location, error)) from None
    return all(table in tables for table in _OPTUNA_TABLES)


_SCHEMA_LOCK_KEY = 0x6175746F74756E65
"""The advisory lock that searches creating one database's tables take in turn."""
_SCHEMA_LOCK = {
    "postgresql": ("SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"),
    "mysql": ("SELECT GET_LOCK(CAST(:key AS CHAR), -1)", "SELECT RELEASE_LOCK(CAST(:key AS CHAR))"),
}


@contextlib.contextmanager
def _schema_lock(location: StudyLocation, engine: Any) -> Iterator[Any]:
    """A connection holding the database's schema lock: two searches that start together
    on an empty database would otherwise both create Optuna's tables, and the second
    fail on a duplicate type or table."""
    import sqlalchemy

    lock, unlock = _SCHEMA_LOCK.get(location.dialect, (None, None))
    try:
        connection = engine.connect()
    except Exception as error:
        raise StudyError(explain(location, error)) from None
    with connection:
        if lock is not None:
            connection.execute(sqlalchemy.text(lock), {"key": _SCHEMA_LOCK_KEY})
        try:
            yield connection
        finally:
            if unlock is not None:
                connection.execute(sqlalchemy.text(unlock), {"key": _SCHEMA_LOCK_KEY})


def _open(
    location: StudyLocation, *, engine_kwargs: dict[str, Any], existed: bool
) -> BeatingStorage:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            return BeatingStorage(
                location.storage_url,
                path=location.path,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_SECONDS,
                grace_period=3 * HEARTBEAT_SECONDS,
                # A study's tables exist already: opening one must not write into it
                # before its schema is known to be one this Optuna reads.
                skip_table_creation=existed,
            )
    except Exception as error:
        raise StudyError(explain(location, error)) from error


@contextlib.contextmanager
def storage_errors(location: StudyLocation) -> Iterator[None]:
    """Turn an error of the storage (a lock held past the timeout, a lost connection) into
    one line naming the study and what to do, rather than an internal error."""
    import sqlalchemy.exc

    try:
        yield
    except sqlalchemy.exc.SQLAlchemyError as error:
        raise StudyError(explain(location, error, opening=False)) from error
    except optuna.exceptions.StorageInternalError as error:  # Optuna's wrapper of the same
        cause = error.__cause__ if error.__cause__ is not None else error
        raise StudyError(explain(location, cause, opening=False)) from error


def explain(location: StudyLocation, error: BaseException, *, opening: bool = True) -> str:
    """One line on why the storage at ``location`` failed with ``error``, while opening
    it (nothing written) or later (what was written before is kept)."""
    text = str(error)
    first = text.splitlines()[0] if text else type(error).__name__
    if location.path is not None and _sqlite.is_lock_timeout(error):
        return _sqlite.locked(location.path)
    if "no longer compatible" in text:
        return _incompatible(location, text)
    if location.path is not None:
        if "malformed" in text or "not a database" in text:
            return _sqlite.corrupt(location.path, first)
        return f"{location} cannot be opened as a study: {first}"
    return _database_problem(location, text, first, opening=opening)


def _incompatible(location: StudyLocation, text: str) -> str:
    if "optuna storage upgrade" in text:
        url = location.storage_url if location.path is not None else str(location)
        return (
            f"{location} was written by an older Optuna; upgrade it with `optuna storage "
            f"upgrade --storage {url}` (keep a copy first). Nothing was written."
        )
    return (
        f"{location} was written by a newer Optuna than this one ({optuna.__version__}); "
        "upgrade optuna and autotune to read it. Nothing was written."
    )


_DATABASE_PROBLEMS = (
    (
        ("password authentication failed", "access denied", "authentication failed"),
        "the server refused the URL's user name or password; check both",
    ),
    (
        ("does not exist", "unknown database"),
        "the server has no such database; create it (`createdb NAME`, or CREATE DATABASE) "
        "or fix the URL",
    ),
    (
        (
            "connection refused",
            "could not connect",
            "connection failed",
            "timeout expired",
            "could not translate host name",
            "name or service not known",
            "can't connect",
            "server closed the connection",
        ),
        "the database server cannot be reached; check that it runs and the URL's host and port",
    ),
)


def _database_problem(location: StudyLocation, text: str, first: str, *, opening: bool) -> str:
    lowered = text.lower()
    after = (
        "Nothing was written."
        if opening
        else "What the search wrote before is kept; run it again to continue."
    )
    for needles, advice in _DATABASE_PROBLEMS:
        if any(needle in lowered for needle in needles):
            return f"{location}: {advice} ({_detail(first)}). {after}"
    return f"{location} cannot be used as a study: {_detail(first)}. {after}"


def _detail(first: str) -> str:
    """The driver's own words, without SQLAlchemy's wrapper ``(psycopg.OperationalError)``."""
    if first.startswith("(") and ") " in first:
        first = first.split(") ", 1)[1]
    return first.strip().rstrip(".")
