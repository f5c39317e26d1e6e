"""Saved studies: where they go, what is refused, and loading settings back."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import pytest
import workloads
from conftest import copy_of

import autotune
from autotune import StudyError
from autotune.study import (
    Attr,
    StudyLocation,
    TrialHeartbeats,
    fail_abandoned,
    locate,
    open_study,
    owner,
)


def test_a_study_is_named_by_a_name_a_path_or_a_url() -> None:
    def where(study: str | None, default: str | None = "x", **kw: str) -> tuple[object, ...]:
        found = locate(study, default, **kw)
        return (found.path, found.url, found.name)

    assert where(None, "quickstart") == (Path("studies/quickstart.db"), None, "quickstart")
    assert where("mine") == (Path("studies/mine.db"), None, "mine")
    assert where("out/run.db") == (Path("out/run.db"), None, "run")
    assert where("/abs/a.db") == (Path("/abs/a.db"), None, "a")
    assert where("/abs/a.db", name="other") == (Path("/abs/a.db"), None, "other")
    # A URL: a database; its study is named by --study-name, else the config's name.
    url = "postgresql://bob:secret@db.example:5432/tuning"
    assert where(url) == (None, url, "x")
    assert where(url, name="team") == (None, url, "team")
    assert where(url, None) == (None, url, None)  # show: the only study there
    # sqlite:/// is a file, checked and locked as a path is.
    assert where("sqlite:///runs/b.db") == (Path("runs/b.db"), None, None)
    assert where("sqlite:////abs/b.db", name="b") == (Path("/abs/b.db"), None, "b")


def test_a_url_is_shown_without_its_password() -> None:
    shown = str(locate("postgresql://bob:secret@db.example/tuning", "x"))
    assert shown == "postgresql://bob:***@db.example/tuning"
    assert str(StudyLocation(name="a", path=Path("s/a.db"))) == "s/a.db"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost/0", "'redis' is not a database a study can be kept in"),
        ("sqlite:///:memory:", "an in-memory database keeps nothing"),
        ("sqlite://", "expected sqlite:///PATH naming a file"),
    ],
)
def test_a_url_of_no_study_storage_is_refused_in_one_line(url: str, expected: str) -> None:
    with pytest.raises(StudyError, match=expected) as raised:
        locate(url, "x")
    assert "\n" not in str(raised.value)


def test_load_by_path_and_the_loader(saved_study: Path) -> None:
    result = autotune.load(saved_study)
    assert result.confirmed
    assert result.settings.batch_size in (8, 16)  # the small study's candidates
    assert result.baseline is not None and result.baseline.settings.num_workers == 0
    loader = result.loader(workloads.SleepyDataset(length=16))
    assert loader.num_workers == result.settings.num_workers


def test_load_exported_json(saved_study: Path, tmp_path: Path) -> None:
    exported = tmp_path / "settings.json"
    exported.write_text(json.dumps(autotune.load(saved_study).to_dict()))
    again = autotune.load(exported)
    assert again.settings == autotune.load(saved_study).settings
    assert again.figures.samples_per_s == pytest.approx(autotune.load(saved_study).samples_per_s)


def test_an_unfinished_search_still_gives_settings(saved_study: Path, tmp_path: Path) -> None:
    path = copy_of(saved_study, tmp_path)
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    study._storage.set_study_user_attr(study._study_id, Attr.RESULT, None)
    result = autotune.load(path)
    assert not result.confirmed
    assert result.baseline is None
    assert result.settings.batch_size in (8, 16)


def test_a_study_file_locked_once_open_is_refused_after_one_wait_not_optunas_five(
    tmp_path, monkeypatch
) -> None:
    # Optuna tries a new trial five times, up to 2 s apart; each try on a locked file
    # would wait the whole timeout again and end in Optuna's StorageInternalError.
    monkeypatch.setattr("autotune.study._sqlite.LOCK_TIMEOUT_SECONDS", 1.0)
    path = tmp_path / "s.db"
    study = open_study(locate(str(path), None), create=True, writes=True)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with (
            warnings.catch_warnings(),
            pytest.raises(StudyError, match=f"^{path} is locked by another process and "),
        ):
            warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")
            study.ask()
        assert time.monotonic() - started < 5 * 1.0
        # Opening it to write waits too, and is refused the same way.
        with pytest.raises(StudyError, match="stayed locked for 1 s"):
            open_study(locate(str(path), None), create=False, writes=True)
        # Reading it does not wait: the file is in WAL mode.
        assert open_study(locate(str(path), None), create=False).study_name == "s"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(study.trials) == 0


_READ_AND_CLOSE = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1])
print(connection.execute("SELECT count(*) FROM trials").fetchone()[0])
connection.close()
"""
"""Another process reading the study and closing: its last connection, if it took itself
for the file's last, folds the WAL in and deletes it."""


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_opening_a_study_again_keeps_what_this_process_holds_open_of_it(tmp_path) -> None:
    # POSIX locks belong to a process: an opening that read the file beside SQLite would
    # drop, on closing that read, the locks the first opening's connection holds, and the
    # other process's close would delete the WAL under it (later reads stale, writes lost).
    # A search opens its study twice: to write, then to list the studies the file keeps
    # for a warm start.
    path = tmp_path / "s.db"
    first = open_study(locate(str(path), None), create=True, writes=True)
    first.ask()
    assert open_study(locate(str(path), None), create=False).study_name == "s"

    def trials_seen_elsewhere() -> int:
        done = subprocess.run(
            [sys.executable, "-c", _READ_AND_CLOSE, str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(done.stdout)

    assert trials_seen_elsewhere() == 1
    assert Path(f"{path}-wal").exists()  # still this process's to fold in
    first.ask()
    assert trials_seen_elsewhere() == 2  # the second trial was not written to a lost WAL
    assert len(first.trials) == 2


def test_a_missing_study_is_not_created_by_reading(tmp_path) -> None:
    with pytest.raises(StudyError, match="no study at"):
        autotune.load(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()


def running(study: optuna.Study, who: dict | None, *, beat: bool = True) -> int:
    """A RUNNING trial owned by ``who``, with a heartbeat (when ``beat``); its id."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Heartbeat of storage.*")
        trial = study.ask()
    if who is not None:
        trial.set_user_attr(Attr.OWNER, who)
    if beat:
        study._storage.record_heartbeat(trial._trial_id)
    return trial._trial_id


def test_trials_of_a_search_gone_are_failed_with_why_and_only_those(tmp_path) -> None:
    path = tmp_path / "s.db"
    study = open_study(locate(path, None, name="s"), create=True)
    elsewhere = {"host": "elsewhere", "pid": 4321, "started": 0.0}
    dead_here = {**owner(), "pid": 2**22 + 1}  # above any pid Linux gives
    ids = {
        "dead here": running(study, dead_here, beat=False),
        "alive here": running(study, owner()),
        "elsewhere": running(study, elsewhere),
        "elsewhere, never beat": running(study, elsewhere, beat=False),
        "nobody's": running(study, None),
    }
    # On this machine the process is checked at once; elsewhere, the heartbeat must
    # have gone stale first.
    assert fail_abandoned(study) == [0]
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00'")
    assert fail_abandoned(study) == [2, 4]

    trials = {name: study._storage.get_trial(i) for name, i in ids.items()}
    left = {name for name, trial in trials.items() if trial.state.name == "RUNNING"}
    # A late heartbeat of a search alive here is not a death; no heartbeat ever, no clue.
    assert left == {"alive here", "elsewhere, never beat"}
    notes = {name: trials[name].user_attrs[Attr.FAILURE] for name in trials.keys() - left}
    assert {note["kind"] for note in notes.values()} == {"interrupted"}
    assert notes["dead here"]["message"] == (
        f"the search running it (pid {2**22 + 1}) ended before it finished"
    )
    assert notes["elsewhere"]["message"] == (
        "the search running it (pid 4321 on elsewhere) sent no heartbeat for 30 s; "
        "taken as ended (killed, or its machine lost)"
    )
    assert notes["nobody's"]["message"].startswith("the search running it (owner unknown)")


def test_a_trial_run_outside_optuna_s_loop_beats_while_it_runs(tmp_path) -> None:
    study = open_study(locate(tmp_path / "s.db", None, name="s"), create=True)
    trial_id = running(study, owner(), beat=False)
    with TrialHeartbeats(study) as heartbeat:
        heartbeat.add(trial_id)  # the first beat at once
        with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as connection:
            beats = connection.execute("SELECT trial_id FROM trial_heartbeats").fetchall()
        assert beats == [(trial_id,)]
    with TrialHeartbeats(optuna.create_study()) as heartbeat:  # in memory: nothing to beat in
        heartbeat.add(0)
