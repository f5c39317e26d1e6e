"""The embedded storage: a study in one SQLite file, checked before Optuna writes to it.

The file is kept in WAL journal mode (readers never wait for a writer) with a busy
timeout, and opened under a lock on its directory; a file that is not a study, is
corrupt, or stays locked past the timeout is one line naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune._errors import StudyError

LOCK_TIMEOUT_SECONDS = 60.0
"""How long opening or writing a study waits while another process holds its lock."""


def check_file(path: Path) -> None:
    """Refuse a file that is not an Optuna study, before Optuna writes into it.

    The file is read through SQLite alone, never opened beside it: POSIX locks belong to
    a process, so closing any other descriptor of the file drops every lock this
    process's open connections hold on it, and another process closing its last
    connection would then delete the WAL and its index under them (writes lost, reads
    of a stale study, "disk I/O error").
    """
    if path.is_dir():
        raise StudyError(f"{path} is a directory; expected a study file (.db).")
    if path.stat().st_size == 0:  # SQLite would take it for a new, empty database
        raise StudyError(not_sqlite(path))
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
        if is_lock_timeout(error):
            raise StudyError(locked(path)) from None
        raise StudyError(corrupt(path, str(error))) from None
    except sqlite3.DatabaseError as error:
        if _error_name(error) == "SQLITE_NOTADB":
            raise StudyError(not_sqlite(path)) from None
        raise StudyError(corrupt(path, str(error))) from None
    if problems != ["ok"]:
        raise StudyError(corrupt(path, problems[0].replace("\n", " ")))
    if "studies" not in tables or "trials" not in tables:
        raise StudyError(
            f"{path} is an SQLite database but not a study (no Optuna tables). Nothing was "
            "written; give another --study path."
        )


def not_sqlite(path: Path) -> str:
    """The line for a file that is no SQLite database at all."""
    return (
        f"{path} is not a study: it is not an SQLite database. Nothing was written; "
        "give another --study path."
    )


def _error_name(error: sqlite3.Error) -> str:
    """SQLite's name for the code of ``error`` ("SQLITE_NOTADB"); Python before
    3.11 gives none, and then the message SQLite writes for the code stands in."""
    name = getattr(error, "sqlite_errorname", None)
    if name is not None:
        return str(name)
    return "SQLITE_NOTADB" if "file is not a database" in str(error) else ""


def corrupt(path: Path, detail: str) -> str:
    """The line for a study file SQLite cannot read."""
    return (
        f"{path} is corrupt ({detail}). Nothing was written; restore it from a copy or give "
        "another --study path."
    )


def is_lock_timeout(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's busy timeout running out while another process held
    the file ("database is locked"), raised by sqlite3 itself or wrapped by SQLAlchemy
    or Optuna: the one test of it, as SQLite gives no error code of its own for it."""
    return "locked" in str(error)


def locked(path: Path) -> str:
    """The line for a study file another process held locked past the timeout."""
    return (
        f"{path} is locked by another process and stayed locked for "
        f"{LOCK_TIMEOUT_SECONDS:g} s, so nothing more was written to it; wait for that "
        "process to finish (or end it) and run again, or give another --study path (for "
        "many processes writing one study, keep it in PostgreSQL: --study postgresql://...)."
    )


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
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
                    raise StudyError(locked(path)) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(handle)  # releases the lock


def refuse_when_locked(engine: Any, path: Path) -> None:
    """Make a statement on ``engine`` that waited out the busy timeout raise the study's
    locked line at once.

    Optuna retries a trial's creation five times, up to 2 s apart, for a database server's
    deadlocks; on a file each try waits the whole timeout again, so a locked study would
    be refused only after five timeouts, and the line would name one.
    """
    import sqlalchemy.event

    def refuse(context: Any) -> None:
        error = context.original_exception
        if isinstance(error, sqlite3.OperationalError) and is_lock_timeout(error):
            raise StudyError(locked(path)) from error

    sqlalchemy.event.listen(engine, "handle_error", refuse)


def wait_to_write(path: Path) -> None:
    """Wait, up to the timeout, until the study file at ``path`` can be written (nothing is);
    refused in one line if another process holds it locked that long. Any other error
    (a read-only file) is left to the first write, which names it as it always did."""
    with contextlib.closing(sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECONDS)) as connection:
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
        except sqlite3.OperationalError as error:
            if is_lock_timeout(error):
                raise StudyError(locked(path)) from None


def use_wal(path: Path) -> None:
    """Make the new study file at ``path`` in WAL journal mode, which SQLite keeps in the
    file: readers (``show``, ``report``) never wait for a search writing it."""
    with contextlib.closing(sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECONDS)) as connection:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as error:
            if not is_lock_timeout(error):
                raise StudyError(corrupt(path, str(error))) from None


def checkpoint(path: Path) -> None:
    """Fold the WAL of the study file at ``path`` back into the file; a no-op for a file in
    another journal mode or one that is not a study, and left for later while another
    process holds the WAL (SQLite folds it in when its last connection closes)."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=1.0)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        return
