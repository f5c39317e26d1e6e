"""The search itself is stopped: Ctrl-C (it exits promptly, keeps every finished trial
and --resume continues) or SIGKILL (the study opens afterwards, finished trials intact,
and the next search fails the trial that was running at once). No process is left
behind (the autouse fixtures check, orphans included)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest
from faults import DRIVERS, Case, Running, drive, finished_numbers, study_trials

import autotune
from autotune.cli import main

EIGHT_CONFIGS = {
    "num_workers": [0, 1],
    "prefetch_factor": [1, 2, 4],
    "persistent_workers": False,
    "threads": 1,
    "batch_size": [8, 16],
    "amp": "off",
}
LONG = Case(space=EIGHT_CONFIGS, options={"trials": 8, "max_windows": 8, "window_seconds": 0.2})
"""Trials of about two seconds, so that a signal lands in one."""


def check_kept(trials: list, finished: set[int]) -> None:
    """Every trial reported finished is in the study, finished, with its figures."""
    by_number = {t.number: t for t in trials}
    for number in finished:
        trial = by_number[number]
        assert trial.state in ("COMPLETE", "PRUNED", "FAIL")
        assert trial.settings is not None
        assert trial.figures is not None and trial.figures.windows


def test_ctrl_c_on_the_command_line(workdir, capsys) -> None:
    running = Running("cli", LONG, workdir)
    running.wait_for(r"trial #1 ")
    time.sleep(0.5)  # trial #2 is under way
    os.killpg(running.process.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
    sent = time.monotonic()
    code, stderr = running.finish(timeout=60)
    assert time.monotonic() - sent < 10
    assert code == 130
    assert "autotune: interrupted; every finished trial is kept in the study" in stderr
    assert "Traceback" not in stderr

    study = workdir / "studies" / "fault.db"
    trials = study_trials(study)
    finished = finished_numbers(stderr)
    assert len(finished) >= 2
    check_kept(trials, finished)
    assert not [t for t in trials if t.state == "RUNNING"]
    interrupted = [t for t in trials if t.number not in finished]
    assert len(interrupted) == 1
    assert interrupted[0].state == "FAIL"
    assert interrupted[0].failure.kind == "interrupted"
    assert interrupted[0].failure.message == "interrupted (Ctrl-C)"

    resumed = drive("cli", LONG, workdir, capsys, "--resume", "--trials", "2")
    assert resumed.code == 0, resumed.error
    after = study_trials(study)
    assert {t.number for t in trials} <= {t.number for t in after}
    explored = [t for t in after if t.role == "explore" and t.state != "FAIL"]
    assert len(explored) == len(finished) + 2
    assert autotune.load(study).confirmed


class CtrlCDuring(autotune.QuietProgress):
    """Sends this process a real SIGINT while trial ``number`` is measuring."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.sent: float | None = None
        self.finished: set[int] = set()

    def window(self, number, window, value) -> None:
        if number == self.number and self.sent is None:
            self.sent = time.monotonic()
            os.kill(os.getpid(), signal.SIGINT)

    def trial_finished(self, record, best) -> None:
        self.finished.add(record.number)


def test_ctrl_c_in_the_python_api(workdir) -> None:
    progress = CtrlCDuring(number=2)
    with pytest.raises(KeyboardInterrupt):
        autotune.search(**LONG.api_kwargs(), progress=progress)
    assert progress.sent is not None
    assert time.monotonic() - progress.sent < 10

    study = workdir / "studies" / "fault.db"
    trials = study_trials(study)
    assert progress.finished == {0, 1}
    check_kept(trials, progress.finished)
    assert trials[2].state == "FAIL" and trials[2].failure.kind == "interrupted"

    result = autotune.search(**{**LONG.api_kwargs(), "trials": 2}, resume=True)
    after = study_trials(study)
    assert [t.state for t in after[:3]] == [t.state for t in trials]
    assert len([t for t in after if t.role == "explore" and t.state != "FAIL"]) == 4
    assert result.confirmed


@pytest.mark.parametrize("driver", DRIVERS)
def test_sigkill_of_the_search(driver, workdir, capsys) -> None:
    running = Running(driver, LONG, workdir)
    running.wait_for(r"trial #1 ")
    time.sleep(0.5)  # trial #2 is under way
    running.process.kill()  # the search alone: its probe must notice and end itself
    code, stderr = running.finish(timeout=60)
    assert code == -signal.SIGKILL

    study = workdir / "studies" / "fault.db"
    trials = study_trials(study)  # it opens
    finished = finished_numbers(stderr)
    assert len(finished) >= 2
    check_kept(trials, finished)
    left_running = [t for t in trials if t.state == "RUNNING"]
    assert len(left_running) == 1
    assert main(["show", str(study)]) == 0
    assert "RUNNING" in capsys.readouterr().out

    # The next search on it fails that trial at once (its search is gone), and goes on.
    again = drive(
        driver,
        dataclasses.replace(LONG, options={**LONG.options, "trials": 1}),
        workdir,
        capsys,
        "--resume",
    )
    assert again.code == 0, again.error
    stale = {t.number: t for t in study_trials(study)}[left_running[0].number]
    assert stale.state == "FAIL"
    assert stale.failure.kind == "interrupted"
    assert stale.failure.message.startswith(f"the search running it (pid {running.process.pid})")
