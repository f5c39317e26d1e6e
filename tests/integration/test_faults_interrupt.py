"""The search itself is stopped: Ctrl-C (it exits promptly, keeps every finished trial
and --resume continues) or SIGKILL (the study opens afterwards, finished trials intact,
and the next search fails the trial that was running at once). No process is left
behind (the autouse fixtures check, orphans included), and nothing is written but the
study (these searches run in an empty directory with an empty HOME)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import workloads
from faults import (
    Case,
    Places,
    Running,
    api_keywords,
    drive,
    finished_numbers,
    probe_request,
    running_trial,
    study_trials,
    wait_for_running_trial,
)

import autotune
from autotune.cli import main
from autotune.probe import run_probe
from autotune.settings import Settings

EIGHT_CONFIGS = {
    "num_workers": [0, 1],
    "prefetch_factor": [1, 2, 4],
    "persistent_workers": False,
    "threads": 1,
    "batch_size": [8, 16],
    "amp": "off",
}
LONG = Case(space=EIGHT_CONFIGS, options={"trials": 8, "max_windows": 5, "window_seconds": 0.2})
"""Trials of about a second, so that a signal lands in one."""


@pytest.fixture
def places(tmp_path, monkeypatch) -> Places:
    places = Places(tmp_path).make()
    monkeypatch.chdir(places.cwd)
    monkeypatch.setenv("HOME", str(places.home))
    return places


def check_kept(trials: list, finished: set[int]) -> None:
    """Every trial reported finished is in the study, finished, with its figures."""
    by_number = {t.number: t for t in trials}
    for number in finished:
        trial = by_number[number]
        assert trial.state in ("COMPLETE", "PRUNED", "FAIL")
        assert trial.settings is not None
        assert trial.figures is not None and trial.figures.windows


@contextlib.contextmanager
def ctrl_c_once_running(study: Path) -> Iterator[list[float]]:
    """Send this process a real SIGINT, as Ctrl-C does, once a trial after the first one
    is measuring; yields the list that gets the time it was sent."""
    sent: list[float] = []

    def watch() -> None:
        with contextlib.suppress(AssertionError):
            wait_for_running_trial(study, at_least=1)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield sent
    thread.join(timeout=10)


def test_ctrl_c_on_the_command_line(places, capsys) -> None:
    study = ("--study", str(places.study))
    places.config.write_text(LONG.config())
    with ctrl_c_once_running(places.study) as sent:
        code = main(["search", str(places.config), *study])
    assert sent and time.monotonic() - sent[0] < 10  # promptly
    assert code == 130
    stderr = capsys.readouterr().err
    assert "autotune: interrupted; every finished trial is kept in the study" in stderr
    assert "Traceback" not in stderr
    places.check_nothing_else_written()

    trials = study_trials(places.study)
    finished = finished_numbers(stderr)
    assert finished
    check_kept(trials, finished)
    assert not [t for t in trials if t.state == "RUNNING"]
    interrupted = [t for t in trials if t.number not in finished]
    assert len(interrupted) == 1
    assert interrupted[0].state == "FAIL"
    assert interrupted[0].failure.kind == "interrupted"
    assert interrupted[0].failure.message == "interrupted (Ctrl-C)"

    resume = (*study, "--resume", "--trials", "1")
    resumed = drive("cli", LONG, places.cwd, capsys, *resume, config=places.config)
    assert resumed.code == 0, resumed.error
    after = study_trials(places.study)
    assert [(t.number, t.state) for t in after[: len(trials)]] == [
        (t.number, t.state) for t in trials
    ]
    explored = [t for t in after if t.role == "explore" and t.state != "FAIL"]
    assert len(explored) == len(finished) + 1
    assert autotune.load(places.study).confirmed
    places.check_nothing_else_written()


def test_a_probe_runs_in_a_session_of_its_own() -> None:
    """So a terminal's Ctrl-C, sent to the search's process group, reaches the search
    alone: it ends the probe and records the trial itself."""
    sessions = []

    def on_window(window, windows) -> bool:
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if process.name() != "pt_data_worker" and process.ppid() != os.getpid():
                    sessions.append((process.pid, os.getsid(process.pid), os.getpgid(process.pid)))
        return False

    settings = Settings(batch_size=4, num_workers=1, prefetch_factor=2)
    run_probe(probe_request(workloads.SleepyDataset(), settings=settings), on_window=on_window)
    probes = [(pid, sid, group) for pid, sid, group in sessions if sid == pid]
    assert len(probes) == 1  # the probe leads a session; its workers are in its group
    assert os.getpgid(0) not in {group for _pid, _sid, group in sessions}


class CtrlCDuring(autotune.QuietProgress):
    """Sends this process a real SIGINT while the first trial measured after one that
    finished is measuring (the warm starts, measured together, end together)."""

    def __init__(self) -> None:
        self.number: int | None = None
        self.sent: float | None = None
        self.finished: set[int] = set()

    def window(self, number, window, value) -> None:
        if self.finished and number not in self.finished and self.sent is None:
            self.number, self.sent = number, time.monotonic()
            self.signal()

    def signal(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    def trial_finished(self, record, best) -> None:
        self.finished.add(record.number)


def interrupted_search(places: Places, progress: CtrlCDuring) -> tuple[dict[str, Any], list]:
    """Run LONG through the API with ``progress`` until its Ctrl-C stops it (promptly);
    the search's keywords and the study's trials: those finished before kept, the one it
    cut short interrupted, and the last."""
    keywords = api_keywords(LONG, ("--study", str(places.study)))
    with pytest.raises(KeyboardInterrupt):
        autotune.search(**keywords, progress=progress)
    assert progress.sent is not None
    assert time.monotonic() - progress.sent < 10
    trials = study_trials(places.study)
    before = {t.number for t in trials if t.number != progress.number}
    assert before and max(before) < (progress.number or 0)
    check_kept(trials, before)
    assert trials[-1].number == progress.number
    assert trials[-1].state == "FAIL" and trials[-1].failure.kind == "interrupted"
    return keywords, trials


def test_ctrl_c_in_the_python_api(places) -> None:
    progress = CtrlCDuring()
    keywords, trials = interrupted_search(places, progress)
    assert progress.finished == {t.number for t in trials[:-1]}

    result = autotune.search(**{**keywords, "trials": 1}, resume=True)
    after = study_trials(places.study)
    assert [t.state for t in after[: len(trials)]] == [t.state for t in trials]
    explored = [t for t in trials if t.role == "explore" and t.state != "FAIL"]
    assert len([t for t in after if t.role == "explore" and t.state != "FAIL"]) == len(explored) + 1
    assert result.confirmed
    places.check_nothing_else_written()


class LostCtrlC(CtrlCDuring):
    """Ctrl-C whose KeyboardInterrupt Python drops: the signal's handler runs while a
    finalizer (``__del__``) runs, and an exception raised there is printed as "Exception
    ignored" and lost. The search must stop all the same."""

    def signal(self) -> None:
        assert threading.current_thread() is threading.main_thread()
        _SignalledInFinalizer()  # collected at once: its __del__ takes the signal


class _SignalledInFinalizer:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # the handler runs in here, its raise is lost
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_lost_in_a_finalizer_still_stops_the_search(places) -> None:
    progress = LostCtrlC()
    _keywords, trials = interrupted_search(places, progress)
    # The trial it cut short is shown, then no other.
    assert progress.finished == {t.number for t in trials}


def test_sigkill_of_the_search(places, capsys) -> None:
    """Through the Python API; the command line's search, killed the same way, is
    tests/integration/test_faults_concurrent.py's (on both storages): a SIGKILL runs no
    code of either, so one more process of the same kill would test nothing new."""
    search = Running("api", LONG, places.cwd, "--study", str(places.study))
    # Killed, the search alone (its probe must notice and end itself), as soon as a trial
    # is done and another one runs.
    deadline = time.monotonic() + 120
    while running_trial(places.study, at_least=1, owned=True) is None:
        assert time.monotonic() < deadline, "no trial #1+ ran"
        assert search.process.poll() is None, "the search ended before it was killed"
        time.sleep(0.05)
    # Killed at once: a trial the pruner stops after its first window (0.2 s after
    # start-up) would otherwise end first, and none be left running.
    time.sleep(0.05)
    search.process.kill()
    code, stderr = search.finish(timeout=60)
    assert code == -signal.SIGKILL
    trials = study_trials(places.study)
    finished = finished_numbers(stderr)
    assert finished
    check_kept(trials, finished)
    left_running = [t for t in trials if t.state == "RUNNING"]
    assert len(left_running) == 1
    # It opens: in `autotune show` and through autotune.load.
    assert main(["show", str(places.study)]) == 0
    assert "RUNNING" in capsys.readouterr().out
    assert autotune.load(places.study).settings is not None
    places.check_nothing_else_written(killed=True)

    # The next search on the study fails the trial left running at once (its search is
    # gone, on this machine), and goes on.
    shorter = dataclasses.replace(LONG, options={**LONG.options, "trials": 1})
    study = ("--study", str(places.study))
    again = drive("cli", shorter, places.cwd, capsys, *study, "--resume", config=places.config)
    assert again.code == 0, again.error
    stale = {t.number: t for t in study_trials(places.study)}[left_running[0].number]
    assert stale.state == "FAIL"
    assert stale.failure.kind == "interrupted"
    assert stale.failure.message.startswith(f"the search running it (pid {search.process.pid})")
    places.check_nothing_else_written()
