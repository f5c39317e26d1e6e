"""Searches that start from earlier studies: a study's own earlier answer measured again
first, and another study's finalists tried first by a new one."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest
import workloads
from conftest import copy_of, quick

import autotune
from autotune import ConfigError, StudyError
from autotune.cli import main
from autotune.study import WARM_START, Attr, records

SPACE = {"num_workers": [0, 1, 2], "threads": 1, "batch_size": [8, 16]}
"""The space of the shared small study (conftest's ``small_study``)."""


def search_like_the_small_study(study: Path, **options: object) -> tuple[object, str]:
    """A search of the shared small study's workload, into ``study``; its result and its
    progress lines."""
    stream = io.StringIO()
    result = autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        space=SPACE,
        progress=autotune.LineProgress(stream),
        **quick(**{"trials": 2, "seed": 0, "study": str(study), **options}),
    )
    return result, stream.getvalue()


def load(path: Path) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{path}")


def test_a_second_search_measures_the_earlier_answer_again_and_ends_there(
    saved_study, workdir, capsys
) -> None:
    path = copy_of(saved_study, workdir)
    before = load(path)
    first = autotune.SearchResult.from_dict(before.user_attrs[Attr.RESULT])
    assert first.confirmed and not first.is_default
    count = len(before.trials)
    result, lines = search_like_the_small_study(path)

    assert "recheck: this study's earlier answer" in lines
    assert "the earlier answer holds: it reads" in lines
    after = load(path)
    added = after.trials[count:]
    # One round, the earlier choice beside the default loader; nothing explored.
    # One round, the earlier choice and the default loader in turns in one process.
    assert [t.user_attrs["autotune.role"] for t in added] == ["baseline", "confirm"]
    assert result.settings == first.settings
    assert result.rounds == first.rounds + 1
    assert result.speedup_rounds[:-1] == first.speedup_rounds
    assert after.user_attrs[Attr.RESULT]["rounds"] == first.rounds + 1
    # Its time is this search's: the preflight and the recheck, nothing explored.
    assert result.search_time is not None and result.search_time.continued
    assert [name for name, _ in result.search_time.stages] == ["preflight", "recheck"]
    (start,) = after.user_attrs[Attr.STARTS]
    assert start["held"] is True and start["source"] == "earlier answer"

    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "started " in shown and "the earlier answer holds" in shown


def test_an_earlier_answer_that_no_longer_holds_sends_the_search_on(saved_study, workdir) -> None:
    path = copy_of(saved_study, workdir)
    study = load(path)
    saved = dict(study.user_attrs[Attr.RESULT])
    # Earlier rounds that predicted a speedup no loader of this workload reaches.
    saved["speedup_rounds"] = [400.0, 500.0]
    study.set_user_attr(Attr.RESULT, saved)
    explored = sum(r.role == "explore" and r.probed for r in records(study))

    _, lines = search_like_the_small_study(path)
    assert "the earlier answer no longer holds" in lines and "predicted" in lines
    assert "explore: 2 trials" in lines
    after = load(path)
    assert sum(r.role == "explore" and r.probed for r in records(after)) == explored + 2
    assert after.user_attrs[Attr.RESULT]["speedup_rounds"] != [400.0, 500.0]
    (start,) = after.user_attrs[Attr.STARTS]
    assert start["held"] is False


def with_machine(study: optuna.Study, **changes: object) -> None:
    meta = dict(study.user_attrs[Attr.META])
    meta["machine"] = {**meta["machine"], **changes}
    study.set_user_attr(Attr.META, meta)


def test_a_study_of_another_torch_seeds_a_new_study_with_its_finalists(
    saved_study, workdir, capsys
) -> None:
    old = copy_of(saved_study, workdir)
    with_machine(load(old), torch_version="0.0-another")
    # Into the old study itself, the figures would not compare: the refusal says how
    # to start from it instead.
    with pytest.raises(StudyError, match=rf"--warm-from {old} to try its finalists first"):
        search_like_the_small_study(old)

    new = workdir / "new.db"
    _, lines = search_like_the_small_study(new, warm_from=(str(old),))
    assert "warm start: the " in lines
    assert "(the same workload, measured with torch 0.0-another -> " in lines
    earlier = autotune.SearchResult.from_dict(load(old).user_attrs[Attr.RESULT])
    first = records(load(new))[0]
    assert first.settings == earlier.settings  # the earlier choice first
    assert load(new).trials[0].user_attrs[Attr.PROPOSED_BY] == WARM_START
    (start,) = load(new).user_attrs[Attr.STARTS]
    assert start["source"] == f"study 'copy' in {old}"

    assert main(["show", str(new)]) == 0
    assert f"finalist(s) of study 'copy' in {old}" in capsys.readouterr().out


def test_a_warm_start_needs_a_near_machine_and_a_new_study(saved_study, workdir) -> None:
    old = copy_of(saved_study, workdir)
    with pytest.raises(ConfigError, match="is the study this search adds to"):
        search_like_the_small_study(old, warm_from=(str(old),))
    study = load(old)
    cpus = study.user_attrs[Attr.META]["machine"]["cpus"]
    with_machine(study, cpus=cpus + 6)
    # A far machine is passed over, saying why; the search goes on without it.
    _, lines = search_like_the_small_study(workdir / "new.db", warm_from=(str(old),))
    assert f"other CPUs or GPUs (CPUs {cpus + 6} -> {cpus}) (passed over)" in lines
    assert not load(workdir / "new.db").user_attrs.get(Attr.STARTS)
    with_machine(study, cpus=cpus)
    (workdir / "other").mkdir()
    other = copy_of(saved_study, workdir / "other")
    with pytest.raises(ConfigError, match=r"seeds a new study, and .* has trials already"):
        search_like_the_small_study(other, warm_from=(str(old),))
    with pytest.raises(StudyError, match=r"--warm-from .*missing.db: no study at"):
        search_like_the_small_study(workdir / "third.db", warm_from=(str(workdir / "missing.db"),))


def test_a_search_beside_a_close_study_reaches_its_answer_with_fewer_probes(workdir) -> None:
    # Every forward takes 30 ms whatever the batch and the data is instant, so exploration
    # ends once its first configs have run and the best sits at the model's ceiling: a
    # search that tries a close study's finalists first, in place of the usual starts,
    # gets there sooner than a cold one.
    kwargs = {
        "dataset": workloads.instant_dataset,
        "model": workloads.steady_model,
        "batch_size": 4,  # the default loader far below the ceiling: exploring pays
        "space": {"batch_size": [4, 64], "threads": 1, "amp": "off", "num_workers": [0, 1, 2]},
        # A wide tolerance: "near the ceiling" then holds on a busy machine too.
        **quick(trials=20, seed=0, bounds=True, window_seconds=0.2, tolerance=0.1),
    }

    def probes(name: str, **options: object) -> tuple[int, autotune.SearchResult]:
        stream = io.StringIO()
        result = autotune.search(
            **kwargs, study=f"studies/{name}.db", progress=autotune.LineProgress(stream), **options
        )
        study = optuna.load_study(study_name=name, storage=f"sqlite:///studies/{name}.db")
        explored = [r for r in records(study) if r.role == "explore"]
        return sum(r.probed for r in explored), result

    cold, cold_result = probes("cold", warm_from=())  # a cold search, and the close study
    warm, warm_result = probes("warm", warm_from=["studies/cold.db"])
    assert warm_result.settings.batch_size == cold_result.settings.batch_size == 64
    assert 0 < warm < cold, (warm, cold)
