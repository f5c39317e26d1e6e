"""The study file: corrupt, locked, from a newer format, or not a study at all is a
clear message and nothing is overwritten; loading one tuned on another machine gives
the settings with a warning that names what differs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import optuna
import pytest
from conftest import copy_of
from faults import DRIVERS, Case, one_error_line

import autotune
from autotune import FingerprintWarning, StudyError
from autotune.cli import main
from autotune.study import Attr


def digest(path: Path) -> str:
    """The study's committed content: its WAL, if any, folded in first (SQLite does so
    whenever a last connection closes), so a digest changes only when something was written.
    A file another process holds locked is read as it is, at once: no one else can write
    it meanwhile (SQLite's default wait, 5 s, made each digest of a locked study 5 s)."""
    opened = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=0.1)
    with contextlib.closing(opened) as connection, contextlib.suppress(sqlite3.DatabaseError):
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def refusals(driver: str, path: Path, workdir: Path, capsys) -> list[str]:
    """The errors from reading the study (show / load) and from searching into it."""
    if driver == "cli":
        (workdir / "fault.py").write_text(Case().config())
        messages = []
        for argv in (["show", str(path)], ["search", "fault.py", "--study", str(path)]):
            assert main(argv) == 2
            messages.append(one_error_line(capsys.readouterr().err))
        return messages
    messages = []
    for call in (
        lambda: autotune.load(path),
        lambda: autotune.search(**{**Case().api_kwargs(), "study": str(path)}),
    ):
        with pytest.raises(StudyError) as raised:
            call()
        messages.append(str(raised.value))
    return messages


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[8192 : 8192 + 3000] = b"\x5a" * 3000  # the third page and on
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def sqlite_of_something_else(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id INTEGER)")


def newer_autotune(path: Path) -> None:
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    study.set_user_attr(Attr.META, {**study.user_attrs[Attr.META], "format": 99})


def newer_optuna(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'v9.0.0.a'")
        connection.execute("UPDATE version_info SET library_version = '9.0.0'")


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda p: p.write_bytes(b""), "is not a study: it is not an SQLite database"),
        (lambda p: p.write_text("epoch,loss\n1,0.5\n"), "is not a study: it is not an SQLite"),
        (sqlite_of_something_else, "is an SQLite database but not a study (no Optuna tables)"),
        (truncate, "is corrupt (database disk image is malformed)"),
        (garble, "is corrupt (*** in database main *** Page 3"),
        (newer_optuna, "was written by a newer Optuna than this one"),
        (newer_autotune, "was written by a newer autotune (format 99; this version reads up"),
    ],
    ids=["empty", "csv", "other-sqlite", "truncated", "garbled", "newer-optuna", "newer-format"],
)
def test_a_bad_study_file_is_refused_untouched(
    driver, spoil, message, saved_study, workdir, capsys
) -> None:
    path = copy_of(saved_study, workdir)
    spoil(path)
    before = digest(path)
    for error in refusals(driver, path, workdir, capsys):
        assert message in error
        assert error.count("\n") == 0
    assert digest(path) == before
    # Beside it, at most SQLite's own files of a WAL study (its index and log).
    left = {p.name for p in workdir.iterdir()} - {"copy.db-shm", "copy.db-wal"}
    assert sorted(left) in (["copy.db"], ["copy.db", "fault.py"])


@pytest.fixture
def locked(saved_study, workdir, monkeypatch):
    """A copy of the study that another process holds an exclusive lock on; a lock
    timeout of 0.5 s instead of the default minute."""
    monkeypatch.setattr("autotune.study._sqlite.LOCK_TIMEOUT_SECONDS", 0.5)
    path = copy_of(saved_study, workdir)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "connection = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "connection.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "locked\n"
    yield path
    holder.stdin.close()
    holder.wait(timeout=30)
    holder.stdout.close()


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_locked_study_is_named_as_locked_and_left_alone(
    driver, locked, saved_study, workdir, capsys
):
    before = digest(locked)
    # The study is in WAL mode: a reader does not wait for the writer holding it...
    assert autotune.load(locked).settings == autotune.load(saved_study).settings
    # ...and a search, which writes, is refused in one line once the timeout has passed,
    # before it probes anything.
    if driver == "cli":
        (workdir / "fault.py").write_text(Case().config())
        assert main(["search", "fault.py", "--study", str(locked)]) == 2
        err = capsys.readouterr().err
        error = one_error_line(err)
        assert "training step" not in err  # refused before its first probe
    else:
        with pytest.raises(StudyError) as raised:
            autotune.search(**{**Case().api_kwargs(), "study": str(locked)})
        error = str(raised.value)
    assert error == (
        f"{locked} is locked by another process and stayed locked for 0.5 s, so nothing more "
        "was written to it; wait for that process to finish (or end it) and run again, or "
        "give another --study path (for many processes writing one study, keep it in "
        "PostgreSQL: --study postgresql://...)."
    )
    assert digest(locked) == before


KILLED_WHILE_WRITING = """
import os, signal, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA cache_size = 2")  # so that the write reaches the file at once
connection.execute("BEGIN")
connection.execute("CREATE TABLE ballast (x)")
for i in range(5000):
    connection.execute("INSERT INTO ballast VALUES (?)", (str(i) * 50,))
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("driver", DRIVERS)
def test_a_study_whose_writer_was_killed_mid_write_opens_as_last_committed(
    driver, journal, saved_study, workdir, capsys
) -> None:
    # A new study is in WAL mode; one made by an older autotune has a rollback journal.
    path = copy_of(saved_study, workdir)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA journal_mode={journal}")
    expected = autotune.load(saved_study).settings
    subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, str(path)], check=False)
    hot = Path(f"{path}-{'wal' if journal == 'wal' else 'journal'}")
    assert hot.exists() and hot.stat().st_size > 0  # the half write is there
    if driver == "cli":
        assert main(["show", str(path)]) == 0, capsys.readouterr().err
        assert "best: " in capsys.readouterr().out
    else:
        assert autotune.load(path).settings == expected
    assert not Path(f"{path}-journal").exists()
    with sqlite3.connect(path) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert "ballast" not in tables  # rolled back


def moved(saved_study: Path, workdir: Path) -> Path:
    """A copy of the study whose settings were tuned on another machine."""
    path = copy_of(saved_study, workdir)
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    result = dict(study.user_attrs[Attr.RESULT])
    result["machine"] = {**result["machine"], "cpus": 64, "torch_version": "1.0.0"}
    study.set_user_attr(Attr.RESULT, result)
    return path


WHAT_DIFFERS = r"tuned on another machine \(CPUs 64 -> \d+; torch 1\.0\.0 -> [^;)]+\)"


def test_settings_from_another_machine_load_with_a_warning_in_the_api(saved_study, workdir):
    path = moved(saved_study, workdir)
    with pytest.warns(FingerprintWarning, match=WHAT_DIFFERS):
        settings = autotune.load(path).settings
    assert settings == autotune.load(saved_study).settings  # they still load
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.load(saved_study)  # same machine: no warning


def test_settings_from_another_machine_load_with_a_warning_on_the_command_line(
    saved_study, workdir, capsys
) -> None:
    path = moved(saved_study, workdir)
    for argv in (["show", str(path)], ["export", str(path)]):
        assert main(argv) == 0
        captured = capsys.readouterr()
        warning, *rest = captured.err.splitlines()
        assert rest == []
        assert warning.startswith("autotune: warning: these settings were tuned on another")
        assert re.search(WHAT_DIFFERS, warning)
    exported = json.loads(captured.out)
    assert exported["settings"] == autotune.load(saved_study).settings.to_dict()
    assert main(["export", str(saved_study)]) == 0
    assert capsys.readouterr().err == ""  # same machine: no warning


def test_a_study_directory_is_not_a_study(workdir, capsys) -> None:
    (workdir / "studies" / "x.db").mkdir(parents=True)
    assert main(["show", "studies/x.db"]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        "studies/x.db is a directory; expected a study file (.db)."
    )
    shutil.rmtree(workdir / "studies")
