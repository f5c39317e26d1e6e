"""Searches on Ray Tune (a local Ray of 2 CPUs, one for the module): the study they write,
and what a killed one leaves."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
import ray
import workloads
from conftest import CHILD_PYTHONPATH, defaults_measured, quick
from faults import Case, Places, Running, study_trials, wait_for_running_trial
from optuna.trial import TrialState

import autotune
from autotune import WorkloadError
from autotune.cli import main
from autotune.probe._steady import STEADY_FROM
from autotune.study import Attr, TrialRecord, records

pytestmark = pytest.mark.scaleout

CONFIG = """
from workloads import linear_model, sleepy_dataset
dataset = sleepy_dataset
model = linear_model
batch_size = 8
# No bounds: their compute ceilings (batch 8 against 16 of a linear model, within the
# noise of each other) pick the warm starts' batch size, so the two backends' first
# proposals would follow a coin toss rather than the sampler.
search = {"window_seconds": 0.1, "max_windows": 9, "warmup_seconds": 0.05, "ceilings": False,
          "bounds": False, "trials": 6, "seed": 0, "finalists": 1, "rounds": 1}
space = {"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16], "amp": "off"}
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    """A local Ray of 2 CPUs; the searches use it rather than start their own."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": CHILD_PYTHONPATH}},  # tests' workloads unpickle
        # As the search starts its own: workers at this process's priority, not Ray's 15
        # (each new worker would import torch at a sliver of a loaded machine's CPU).
        _system_config={"worker_niceness": os.getpriority(os.PRIO_PROCESS, 0)},
    )
    yield ray.get_runtime_context().get_node_id()
    ray.shutdown()


def study(path: str) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{path}")


def test_a_ray_search_writes_the_study_the_embedded_one_would(
    local_ray, capsys, write_config
) -> None:
    config = str(write_config(CONFIG))
    assert main(["search", config, "--backend", "ray", "--study", "studies/ray.db"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("best: workers=")
    assert "ray: the Ray session this process had already started: 1 node(s), 2 CPUs" in err
    assert "trials run one at a time" in err

    on_ray = study("studies/ray.db")
    # A config the search queued for a next trial that the budget did not reach stays
    # WAITING, for a resumed search to run; the confirming round never runs it.
    ran = [t for t in on_ray.trials if t.state != TrialState.WAITING]
    explored = [t for t in ran if t.user_attrs["autotune.role"] == "explore"]
    # The budget counts probed trials: repeats of a measured config spend none of it.
    assert sum(TrialRecord.from_trial(t).probed for t in explored) == 6
    confirming = [t.user_attrs["autotune.role"] for t in ran if t not in explored]
    # One round: the finalists (one, or up to twice that where figures overlap, and the
    # leader without workers where it trains at its ceiling), the default beside them.
    assert 1 <= confirming.count("confirm") <= 3
    assert confirming.count("baseline") == defaults_measured(
        confirming.count("confirm"), 1, in_turns=False
    )
    assert set(confirming) == {"baseline", "confirm"}
    assert {t.user_attrs["autotune.role"] for t in ran} == {
        "explore",
        "confirm",
        "baseline",
    }
    assert all(t.user_attrs[Attr.BACKEND] == "ray" for t in ran)
    assert all(t.state != TrialState.RUNNING for t in ran)
    probed = [t for t in ran if "autotune.duplicate_of" not in t.user_attrs]
    pruned = [t for t in probed if t.state == TrialState.PRUNED]
    assert pruned, "ASHA stopped no trial"
    for trial in probed:
        assert trial.user_attrs[Attr.NODE]["node_id"] == local_ray
        # Ray's workers start at niceness 15; the trial probed at the driver's (as root).
        niceness = trial.user_attrs[Attr.NODE]["niceness"]
        assert niceness == os.getpriority(os.PRIO_PROCESS, 0) or os.geteuid() != 0
        figures = trial.user_attrs[Attr.FIGURES]
        windows = len(figures["windows"])
        # Every window's figures are kept, and reported as the intermediate values.
        assert sorted(trial.intermediate_values) == list(range(1, windows + 1))
        assert figures["startup_s"] > 0 and figures["peak_memory_bytes"] > 0
        if trial.user_attrs["autotune.role"] == "explore":
            assert (windows < 9) == (trial.state == TrialState.PRUNED)
        else:  # a confirming probe is never pruned, and may end once its windows agree
            assert trial.state == TrialState.COMPLETE and STEADY_FROM <= windows <= 9
        if trial.state == TrialState.PRUNED:
            assert trial.value == trial.intermediate_values[windows]

    # The embedded backend on the same config: the same proposals first (same sampler),
    # a result of the same shape, and trials told apart only by the backend attribute.
    assert main(["search", config, "--study", "studies/optuna.db"]) == 0
    capsys.readouterr()
    embedded = study("studies/optuna.db")
    first = [r.settings for r in records(on_ray) if r.role == "explore"][:6]
    assert first == [r.settings for r in records(embedded) if r.role == "explore"][:6]
    ray_result = on_ray.user_attrs["autotune.result"]
    embedded_result = embedded.user_attrs["autotune.result"]
    assert ray_result.keys() == embedded_result.keys()
    assert ray_result["settings"].keys() == embedded_result["settings"].keys()
    for ray_trial, embedded_trial in zip(on_ray.trials[:6], embedded.trials[:6], strict=True):
        assert ray_trial.user_attrs.keys() - {Attr.NODE} == embedded_trial.user_attrs.keys()
        assert embedded_trial.user_attrs[Attr.BACKEND] == "optuna"

    # Resuming on Ray adds to the study; its confirming rounds run one after the other
    # (no runoff: whether one runs turns on the noise of real measurements).
    resume = ["--backend", "ray", "--study", "studies/ray.db", "--resume", "--trials", "1"]
    assert main(["search", config, *resume, "--rounds", "2", "--runoff-rounds", "0"]) == 0
    capsys.readouterr()
    assert sum(r.probed for r in records(study("studies/ray.db")) if r.role == "explore") == 7
    assert_last_two_rounds(study("studies/ray.db").trials)


def assert_last_two_rounds(trials: list[optuna.trial.FrozenTrial]) -> None:
    """The last two confirming rounds among ``trials`` (by group, in the order their
    trials were made): whole rounds, one after the other, the same configs, the second
    in the first's order reversed (so the first ends with the default loader and the
    second starts with it)."""
    groups = [
        t.user_attrs[Attr.GROUP] for t in trials if t.user_attrs["autotune.role"] != "explore"
    ]
    first, second = list(dict.fromkeys(groups))[-2:]
    confirming = [t for t in trials if t.user_attrs.get(Attr.GROUP) in (first, second)]
    roles = [t.user_attrs["autotune.role"] for t in confirming]
    half = len(confirming) // 2
    assert [t.user_attrs[Attr.GROUP] for t in confirming] == [first] * half + [second] * half
    assert roles[:half] == roles[half:][::-1] and roles[half - 1] == "baseline"
    settings = [t.user_attrs["autotune.settings"] for t in confirming]
    assert settings[:half] == settings[half:][::-1] and len(settings) > 2
    assert all(t.state == TrialState.COMPLETE for t in confirming)


def test_failures_on_ray_are_recorded_with_their_reason(local_ray, workdir) -> None:
    # The user's code fails in every config: the search stops with that one error.
    with pytest.raises(WorkloadError, match=r"every config failed the same way.*corrupt record"):
        autotune.search(
            dataset=workloads.FailingAfterDataset(after=8),
            model=workloads.linear_model,
            batch_size=4,
            name="failing",
            space={"num_workers": 0, "batch_size": [4, 8, 16, 32], "threads": [1, 2]},
            backend="ray",
            **quick(trials=10),
        )
    failed = records(study("studies/failing.db"))
    assert 3 <= len(failed) < 10
    for record in failed:
        assert record.state == "FAIL" and record.backend == "ray"
        assert record.failure.kind == "error" and "dataset" in record.failure.piece
        assert "corrupt record" in record.failure.message

    # The Ray worker running a trial dies (as on a lost node): recorded, not dropped.
    with pytest.raises(WorkloadError, match="no config finished a probe"):
        autotune.search(
            dataset=workloads.RayWorkerKillingDataset(),
            model=workloads.linear_model,
            batch_size=4,
            name="dying",
            space={"num_workers": 0, "batch_size": 4, "threads": 1},
            backend="ray",
            **quick(trials=1),
        )
    (dead,) = records(study("studies/dying.db"))
    assert dead.state == "FAIL" and dead.failure.kind == "crash"
    assert dead.failure.message.startswith("the Ray worker running the trial died")


def running_and_beating(study: Path) -> set[int]:
    """The RUNNING trials of the study at ``study`` that have a heartbeat."""
    uri = f"file:{study}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as connection:
        rows = connection.execute(
            "SELECT number FROM trials JOIN trial_heartbeats USING (trial_id) "
            "WHERE state = 'RUNNING'"
        ).fetchall()
    return {int(row[0]) for row in rows}


def in_session(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid`` (Ray's workers have process groups of their
    own, not sessions)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == sid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def kill_with_its_ray(search: Running) -> None:
    """SIGKILL a search and the local Ray it started: Ray's servers and agents are in the
    search's process group, its workers in its session (in groups of their own). Left to
    themselves they do end, but slowly: the agents retry the dead GCS for a minute, a
    worker still starting up half a minute. The probes the workers ran end by
    themselves (the autouse fixture checks that no process is left)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(search.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (alive := in_session(search.process.pid)) and time.monotonic() < deadline:
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        time.sleep(0.1)
    assert not alive, f"processes of the search outlived SIGKILL: {alive}"
    search.finish(timeout=60)  # its output ends once all that shared it are gone


def test_a_killed_ray_search_leaves_no_trial_running_once_resumed(
    tmp_path, monkeypatch, capsys
) -> None:
    places = Places(tmp_path).make()
    monkeypatch.chdir(places.cwd)
    case = Case(options={"trials": 4, "max_windows": 4, "window_seconds": 0.3, "rounds": 1})
    study = ("--study", str(places.study))
    env = {"HOME": str(places.home)}
    search = Running(
        "cli", case, places.cwd, "--backend", "ray", *study, config=places.config, env=env
    )
    try:
        wait_for_running_trial(places.study, at_least=0)
        deadline = time.monotonic() + 10
        while not running_and_beating(places.study) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running_and_beating(places.study), "the driver's running trial has no heartbeat"
    finally:
        kill_with_its_ray(search)
    assert search.process.returncode == -signal.SIGKILL
    left = {t.number for t in study_trials(places.study) if t.state == "RUNNING"}
    assert left

    # The next search on the study fails them at once (the driver that owned them is
    # gone, on this machine), saying why, and goes on.
    resumed = ["search", str(places.config), *study, "--resume", "--trials", "1"]
    assert main(resumed) == 0, capsys.readouterr().err
    trials = {t.number: t for t in study_trials(places.study)}
    assert not [t for t in trials.values() if t.state == "RUNNING"]
    for number in left:
        assert trials[number].state == "FAIL"
        assert trials[number].failure.kind == "interrupted"
        assert trials[number].failure.message == (
            f"the search running it (pid {search.process.pid}) ended before it finished"
        )
