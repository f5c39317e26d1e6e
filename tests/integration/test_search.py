"""Whole searches through the Python API, on small workloads with known behaviour."""

from __future__ import annotations

import shutil

import optuna
import pytest
import workloads
from conftest import defaults_measured, quick
from torch.utils.data import DataLoader

import autotune
from autotune import ConfigError, StudyError
from autotune.study import Attr, records


def small_search(space: dict[str, object] | None = None, **options):
    return autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        name="small",
        space={"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16], **(space or {})},
        **quick(**{"trials": 8, "seed": 0, **options}),
    )


def test_a_search_saves_its_trials_and_returns_a_tuned_loader(workdir) -> None:
    # No runoff: whether one runs turns on the noise of real measurements, and its rounds
    # are tested with a stand-in backend (test_confirm). Persistent workers only: a
    # finalist's persistent twin (test_confirm too) would add to every round's configs.
    result = small_search({"persistent_workers": True}, rounds=2, runoff_rounds=0, finalists=3)
    assert (workdir / "studies" / "small.db").exists()
    assert result.study_path == "studies/small.db"
    assert result.confirmed
    assert result.baseline is not None
    assert result.baseline.settings == autotune.Settings(batch_size=8)
    assert result.samples_per_s > 0 and result.speedup is not None
    # I/O-bound items: some workers beat none.
    assert result.settings.num_workers > 0
    assert result.speedup > 1.2
    loader = result.loader(workloads.SleepyDataset(length=32))
    assert isinstance(loader, DataLoader)
    assert loader.num_workers == result.settings.num_workers
    assert loader.batch_size == result.settings.batch_size

    study = optuna.load_study(study_name="small", storage="sqlite:///studies/small.db")
    # The default loader is measured in each of the 2 interleaved rounds, beside the
    # finalists.
    rounds: dict[str, list[str]] = {}
    for trial in study.trials:
        if Attr.GROUP in trial.user_attrs:
            rounds.setdefault(trial.user_attrs[Attr.GROUP], []).append(trial.user_attrs[Attr.ROLE])
    assert len(rounds) == result.rounds == 2
    for roles in rounds.values():
        assert roles.count("confirm") >= 1
        assert roles.count("baseline") == defaults_measured(roles.count("confirm"), 1)
    # Eight explored configs probed: repeats of a measured config spend no budget.
    assert sum(r.role == "explore" and r.probed for r in records(study)) == 8
    meta = study.user_attrs["autotune"]
    assert meta["workload"]["dataset_length"] == 256
    assert meta["machine"]["cpus"] >= 1 and meta["machine"]["torch_version"]
    assert study.user_attrs["autotune.result"]["settings"] == result.settings.to_dict()
    # Timed by the stages it ran (no bounds, so no worker sweep; no ceilings; no runoff).
    took = result.search_time
    assert took is not None and not took.continued
    assert [stage for stage, _ in took.stages] == ["preflight", "explore", "confirm"]
    assert all(seconds > 0 for _, seconds in took.stages)
    assert sum(seconds for _, seconds in took.stages) <= took.total_s
    assert autotune.load("studies/small.db").search_time == took


def test_asha_prunes_slow_configs(workdir) -> None:
    small_search(max_windows=9, trials=10)
    study = optuna.load_study(study_name="small", storage="sqlite:///studies/small.db")
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned
    # Rungs at 1, 3 and 9 windows: a pruned trial stops at the rung where it lost (one
    # more window may finish while the verdict travels); one pruned at the last rung has
    # run them all, but most stop early.
    stopped_at = [len(t.user_attrs["autotune.figures"]["windows"]) for t in pruned]
    assert all(n in (1, 2, 3, 4, 9) for n in stopped_at), stopped_at
    assert min(stopped_at) < 9


def test_a_second_search_adds_to_the_same_study(workdir) -> None:
    small_search(trials=2)
    small_search(trials=1, resume=True)
    study = optuna.load_study(study_name="small", storage="sqlite:///studies/small.db")
    # 2 + 1 probed; repeats of a measured config spend none of the budget
    assert sum(1 for r in records(study) if r.role == "explore" and r.probed) == 3


def test_resume_needs_an_existing_study(workdir) -> None:
    with pytest.raises(StudyError, match=r"no study at studies/small\.db"):
        small_search(resume=True)


def test_a_study_of_another_workload_is_refused(saved_study, workdir) -> None:
    # The shared small study is small_search's workload.
    (workdir / "studies").mkdir()
    shutil.copy(saved_study, workdir / "studies" / "small.db")
    with pytest.raises(StudyError, match="another workload"):
        autotune.search(
            dataset=workloads.SleepyDataset(length=99),
            model=workloads.linear_model,
            study="small",
            **quick(trials=2),
        )


def test_a_space_that_is_fully_measured_ends_exploration_early(workdir) -> None:
    result = autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        space={
            "num_workers": [0, 1],
            "prefetch_factor": 2,
            "persistent_workers": True,
            "batch_size": 8,
            "threads": 1,
        },
        **quick(trials=20),
    )
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    explored = [r for r in records(study) if r.role == "explore"]
    assert len(explored) < 20
    assert {r.settings.num_workers for r in explored} == {0, 1}
    assert result.settings.num_workers in (0, 1)


def test_api_arguments_are_checked(workdir) -> None:
    with pytest.raises(ConfigError, match="nothing to tune"):
        autotune.search(dataset=workloads.sleepy_dataset)
    with pytest.raises(ConfigError, match="not both"):
        autotune.search("x.py", dataset=workloads.sleepy_dataset, model=workloads.linear_model)
    with pytest.raises(ConfigError, match="cannot be sent to a probe process"):
        autotune.search(dataset=lambda: workloads.SleepyDataset(), model=workloads.linear_model)
    with pytest.raises(ConfigError, match="unknown options \\['trails'\\]"):
        autotune.search(dataset=workloads.sleepy_dataset, model=workloads.linear_model, trails=3)


def test_a_repeat_proposal_makes_room_for_an_unmeasured_config(workdir) -> None:
    space = {
        "num_workers": [0, 1, 2],
        "prefetch_factor": 2,
        "persistent_workers": True,
        "batch_size": [8, 16],
        "threads": 1,
        "amp": "off",
    }
    autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        space=space,
        **quick(trials=14, seed=3),
    )
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    explored = [r for r in records(study) if r.role == "explore"]
    probed = {r.settings.key() for r in explored if r.duplicate_of is None}
    assert len(probed) == 6  # every config of the space measured once
    assert len(explored) < 14  # and exploration stopped when nothing new was left
    queued = [t for t in study.trials if "autotune.proposed_by" in t.user_attrs]
    repeats = [r for r in explored if r.duplicate_of is not None]
    assert len(queued) >= len(repeats) - 1  # each repeat queued something new instead


def test_a_step_off_the_cpu_is_searched_on_one_training_thread(workdir) -> None:
    # steady_model's forward waits (as a step on an accelerator does): its CPU is idle.
    result = autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.steady_model,
        batch_size=8,
        name="off-cpu",
        space={"num_workers": [0, 1], "batch_size": 8, "amp": "off"},
        **quick(trials=3, seed=0),
    )
    assert result.workload["step_cpu_share"] < 0.5
    assert result.space["threads"] == {"fixed": 1}
    assert any(
        n.startswith("threads: fixed at 1: the training step kept") for n in result.space["notes"]
    )
    study = optuna.load_study(study_name="off-cpu", storage="sqlite:///studies/off-cpu.db")
    assert {r.settings.threads for r in records(study) if r.role == "explore"} == {1}
