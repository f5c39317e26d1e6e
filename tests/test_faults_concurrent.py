"""Two searches on the same study at once (one from the command line, one from the
Python API): both finish, and no trial is lost or duplicated."""

from __future__ import annotations

import dataclasses

import optuna
import workloads
from conftest import QUICK, defaults_measured
from faults import Running, drive, finished_numbers, probe_request
from test_faults_interrupt import LONG

from autotune.probe import run_probe
from autotune.study._study import GROUP, OWNER, ROLE

BOTH = dataclasses.replace(LONG, options={**LONG.options, "trials": 2, "max_windows": 3})


def test_two_searches_on_one_study_at_once(workdir, capsys) -> None:
    other = Running("cli", BOTH, workdir)
    # Start this process's probes meanwhile, so that its search starts at once.
    assert run_probe(probe_request(workloads.SleepyDataset(), mode="check")).ok
    other.wait_for(r"trial #0 ")
    here = drive("api", BOTH, workdir, capsys)  # while the other one explores
    code, stderr = other.finish(timeout=300)
    assert code == 0, stderr
    assert here.code == 0, here.error

    study = optuna.load_study(study_name="fault", storage=f"sqlite:///{here.study}")
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert len({t._trial_id for t in trials}) == len(trials)
    assert all(t.state.is_finished() for t in trials)

    owners = [t.user_attrs[OWNER]["pid"] for t in trials]
    assert len(set(owners)) == 2
    other_pid = other.process.pid
    by_owner = {pid: [t for t in trials if t.user_attrs[OWNER]["pid"] == pid] for pid in owners}
    for own in by_owner.values():
        explored = [t for t in own if t.user_attrs.get(ROLE) == "explore"]
        assert len(explored) == 2  # each search ran the trials it was asked for
        groups = {t.user_attrs[GROUP] for t in own if GROUP in t.user_attrs}
        # and measured its own finalists and baseline itself, one group a round
        assert len(groups) == QUICK["rounds"]
        roles = [t.user_attrs[ROLE] for t in own if GROUP in t.user_attrs]
        assert "confirm" in roles
        assert roles.count("baseline") == defaults_measured(roles.count("confirm"), QUICK["rounds"])
    # They ran at once: their trials interleave.
    firsts = [min(t.number for t in own) for own in by_owner.values()]
    lasts = [max(t.number for t in own) for own in by_owner.values()]
    assert max(firsts) < min(lasts)
    # What the command line reported is its own trials, all in the study.
    assert finished_numbers(stderr) == {t.number for t in by_owner[other_pid]}
