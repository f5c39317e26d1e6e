"""Two searches on the same study at once (one from the command line, one from the
Python API): both finish, and no trial is lost or duplicated."""

from __future__ import annotations

import dataclasses

import optuna
from conftest import QUICK, defaults_measured
from faults import NAME, Running, finished_numbers
from test_faults_interrupt import LONG
from workloads import TWO_SEARCHES_STUDY

from autotune.study import GROUP, OWNER, ROLE, TrialRecord

BOTH = dataclasses.replace(
    LONG,
    dataset="two_searches_dataset",
    # A first trial waits for the other search's, however long its start-up takes.
    options={**LONG.options, "trials": 2, "max_windows": 3, "trial_timeout": 300.0},
)


def test_two_searches_on_one_study_at_once(workdir) -> None:
    # Each search's first trial waits in its probe until the other search owns a trial
    # too (workloads.TwoSearchesDataset): they run at once whatever the machine's load
    # and whatever runs beside them, not by how fast each one starts.
    path = workdir / "studies" / f"{NAME}.db"
    env = {TWO_SEARCHES_STUDY: str(path)}
    cli = Running("cli", BOTH, workdir, env=env)
    api = Running("api", BOTH, workdir, env=env)
    code, stderr = cli.finish(timeout=300)
    assert code == 0, stderr
    api_code, api_stderr = api.finish(timeout=300)
    assert api_code == 0, api_stderr

    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{path}")
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert len({t._trial_id for t in trials}) == len(trials)
    assert all(t.state.is_finished() for t in trials)

    owners = [t.user_attrs[OWNER]["pid"] for t in trials]
    assert set(owners) == {cli.process.pid, api.process.pid}
    by_owner = {pid: [t for t in trials if t.user_attrs[OWNER]["pid"] == pid] for pid in owners}
    for own in by_owner.values():
        explored = [t for t in own if t.user_attrs.get(ROLE) == "explore"]
        # Each search probed the trials it was asked for; a config the other search had
        # measured already is a repeat, which spends none of the budget.
        assert sum(TrialRecord.from_trial(t).probed for t in explored) == 2
        groups = {t.user_attrs[GROUP] for t in own if GROUP in t.user_attrs}
        # and measured its own finalists and baseline itself, one group a round
        assert len(groups) == QUICK["rounds"]
        roles = [t.user_attrs[ROLE] for t in own if GROUP in t.user_attrs]
        assert "confirm" in roles
        assert roles.count("baseline") == defaults_measured(roles.count("confirm"), QUICK["rounds"])
    # They ran at once: their trials interleave (each one's first before the other's last).
    firsts = [min(t.number for t in own) for own in by_owner.values()]
    lasts = [max(t.number for t in own) for own in by_owner.values()]
    assert max(firsts) < min(lasts)
    # What each reported is its own trials, all in the study.
    assert finished_numbers(stderr) == {t.number for t in by_owner[cli.process.pid]}
    assert finished_numbers(api_stderr) == {t.number for t in by_owner[api.process.pid]}
