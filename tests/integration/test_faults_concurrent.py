"""Two searches on the same study at once (one from the command line in a process of its
own, one from the Python API in the test's), in an SQLite file and in PostgreSQL: both
finish, and no trial is lost or duplicated; a writer killed outright leaves no trial
RUNNING once the study is resumed."""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import signal
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
import workloads
from conftest import QUICK, defaults_measured
from faults import NAME, Running, drive, finished_numbers
from test_faults_interrupt import LONG
from workloads import TWO_SEARCHES_STUDY

import autotune
from autotune.study import Attr, TrialRecord

BOTH = dataclasses.replace(
    LONG,
    dataset="two_searches_dataset",
    # Short windows: what is checked is whose trials the study keeps, not their figures.
    # A first trial waits for the other search's, however long its start-up takes.
    options={
        **LONG.options,
        "trials": 2,
        "max_windows": 2,
        "window_seconds": 0.1,
        "trial_timeout": 300.0,
    },
)


@pytest.fixture(params=["sqlite", "postgresql"])
def shared(request: pytest.FixtureRequest, workdir: Path) -> tuple[str, str]:
    """The study two searches share: its --study and the URL Optuna reads it by."""
    if request.param == "sqlite":
        path = workdir / "studies" / f"{NAME}.db"
        return str(path), f"sqlite:///{path}"
    url = str(request.getfixturevalue("postgres_url"))
    return url, url


def test_two_searches_on_one_study_at_once(workdir, shared) -> None:
    # Each search's first trial waits in its probe until the other search owns a trial
    # too (workloads.TwoSearchesDataset): they run at once whatever the machine's load
    # and whatever runs beside them, not by how fast each one starts. The command line
    # searches in a process of its own, the API in this one.
    where, url = shared
    study = where if "://" in where else str(Path(where).resolve())
    cli = Running("cli", BOTH, workdir, "--study", where, env={TWO_SEARCHES_STUDY: study})
    progress = io.StringIO()
    try:
        autotune.search(
            **{
                **BOTH.api_kwargs(),
                "dataset": functools.partial(workloads.TwoSearchesDataset, study=study),
                "study": where,
                "progress": autotune.LineProgress(progress),
            }
        )
    except BaseException:
        os.killpg(cli.process.pid, signal.SIGKILL)  # its first trial would wait for ours
        raise
    code, stderr = cli.finish(timeout=300)
    assert code == 0, stderr
    api_stderr, api_pid = progress.getvalue(), os.getpid()

    study = optuna.load_study(study_name=NAME, storage=url)
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert len({t._trial_id for t in trials}) == len(trials)
    assert all(t.state.is_finished() for t in trials)

    owners = [t.user_attrs[Attr.OWNER]["pid"] for t in trials]
    assert set(owners) == {cli.process.pid, api_pid}
    by_owner = {
        pid: [t for t in trials if t.user_attrs[Attr.OWNER]["pid"] == pid] for pid in owners
    }
    for own in by_owner.values():
        explored = [t for t in own if t.user_attrs.get(Attr.ROLE) == "explore"]
        # Each search probed the trials it was asked for; a config the other search had
        # measured already is a repeat, which spends none of the budget.
        assert sum(TrialRecord.from_trial(t).probed for t in explored) == 2
        groups = {t.user_attrs[Attr.GROUP] for t in own if Attr.GROUP in t.user_attrs}
        # and measured its own finalists and baseline itself, one group a round
        assert len(groups) == QUICK["rounds"]
        roles = [t.user_attrs[Attr.ROLE] for t in own if Attr.GROUP in t.user_attrs]
        assert "confirm" in roles
        assert roles.count("baseline") == defaults_measured(roles.count("confirm"), QUICK["rounds"])
    # They ran at once: their trials interleave (each one's first before the other's last).
    firsts = [min(t.number for t in own) for own in by_owner.values()]
    lasts = [max(t.number for t in own) for own in by_owner.values()]
    assert max(firsts) < min(lasts)
    # What each reported is its own trials, all in the study.
    assert finished_numbers(stderr) == {t.number for t in by_owner[cli.process.pid]}
    assert finished_numbers(api_stderr) == {t.number for t in by_owner[api_pid]}


def owned_running(url: str, pid: int) -> list[int]:
    """The RUNNING trials of the shared study, once the search ``pid`` owns every one
    (Optuna makes a trial RUNNING a moment before its search writes its owner on it: a
    search killed in between leaves a trial only its heartbeat settles, after its grace
    period); empty until then."""
    try:
        study = optuna.load_study(study_name=NAME, storage=url)
    except (KeyError, sqlalchemy.exc.OperationalError):  # not created yet
        return []
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if not all(t.user_attrs.get(Attr.OWNER, {}).get("pid") == pid for t in running):
        return []
    return [t.number for t in running]


def test_a_writer_killed_outright_leaves_no_trial_running_once_resumed(
    workdir, shared, capsys
) -> None:
    where, url = shared
    (workdir / "studies").mkdir(exist_ok=True)
    killed = Running("cli", BOTH, workdir, "--study", where)
    deadline = time.monotonic() + 240
    while not owned_running(url, killed.process.pid):
        assert time.monotonic() < deadline, "the search to kill ran no trial"
        assert killed.process.poll() is None
        time.sleep(0.05)
    killed.process.kill()
    code, _ = killed.finish(timeout=60)
    assert code == -signal.SIGKILL
    before = optuna.load_study(study_name=NAME, storage=url).get_trials(deepcopy=False)
    assert any(t.state == optuna.trial.TrialState.RUNNING for t in before)

    # The study resumed: the killed search's trial fails at once (its process is gone from
    # this machine), saying why, and the new search's trials join the same study.
    shorter = dataclasses.replace(BOTH, options={**BOTH.options, "trials": 1})
    again = drive("cli", shorter, workdir, capsys, "--study", where, "--resume")
    assert again.code == 0, again.error
    after = optuna.load_study(study_name=NAME, storage=url).get_trials(deepcopy=False)
    assert len(after) > len(before)
    assert sorted(t.number for t in after) == list(range(len(after)))
    assert [t.number for t in after if t.state == optuna.trial.TrialState.RUNNING] == []
    abandoned = [
        t for t in after if t.number in {b.number for b in before if not b.state.is_finished()}
    ]
    for trial in abandoned:
        if trial.state == optuna.trial.TrialState.FAIL:
            assert trial.user_attrs[Attr.FAILURE]["kind"] == "interrupted"
    assert any(
        t.state == optuna.trial.TrialState.FAIL
        and f"(pid {killed.process.pid})" in t.user_attrs.get(Attr.FAILURE, {}).get("message", "")
        for t in abandoned
    )
