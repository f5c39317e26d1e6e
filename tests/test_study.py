"""Saved studies: where they go, what is refused, and loading settings back."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import optuna
import pytest
import workloads
from conftest import quick

import autotune
from autotune import FingerprintWarning, StudyError
from autotune._study import RESULT, open_study, resolve


@pytest.fixture(scope="module")
def saved_study(tmp_path_factory) -> Path:
    """One real small study, shared by the tests of this module (copied before changes)."""
    path = tmp_path_factory.mktemp("study") / "small.db"
    autotune.search(
        dataset=workloads.sleepy_dataset,
        model=workloads.linear_model,
        batch_size=8,
        space={"num_workers": [0, 2], "threads": 1, "batch_size": 8, "amp": "off"},
        **quick(trials=3, seed=0, study=str(path)),
    )
    return path


def copy_of(saved_study: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    shutil.copy(saved_study, target)
    return target


def test_resolve_names_and_paths() -> None:
    assert resolve(None, "quickstart") == (Path("studies/quickstart.db"), "quickstart")
    assert resolve("mine", "x") == (Path("studies/mine.db"), "mine")
    assert resolve("out/run.db", "x") == (Path("out/run.db"), "run")
    assert resolve("/abs/a.db", "x") == (Path("/abs/a.db"), "a")


def test_load_by_path_and_the_loader(saved_study: Path) -> None:
    result = autotune.load(saved_study)
    assert result.confirmed
    assert result.settings.batch_size == 8
    assert result.baseline is not None and result.baseline.settings.num_workers == 0
    loader = result.loader(workloads.SleepyDataset(length=16))
    assert loader.num_workers == result.settings.num_workers


def test_load_exported_json(saved_study: Path, tmp_path: Path) -> None:
    exported = tmp_path / "settings.json"
    exported.write_text(json.dumps(autotune.load(saved_study).to_dict()))
    again = autotune.load(exported)
    assert again.settings == autotune.load(saved_study).settings
    assert again.figures.samples_per_s == pytest.approx(autotune.load(saved_study).samples_per_s)


def test_loading_on_another_machine_warns_what_differs(saved_study: Path, tmp_path: Path) -> None:
    path = copy_of(saved_study, tmp_path)
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    result = dict(study.user_attrs[RESULT])
    result["machine"] = {**result["machine"], "cpus": 64, "torch_version": "1.0.0"}
    study.set_user_attr(RESULT, result)
    with pytest.warns(FingerprintWarning, match=r"CPUs 64 -> \d+; torch 1.0.0 -> "):
        settings = autotune.load(path).settings
    assert settings.batch_size == 8  # the settings still load
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.load(saved_study)  # same machine: no warning


def test_an_unfinished_search_still_gives_settings(saved_study: Path, tmp_path: Path) -> None:
    path = copy_of(saved_study, tmp_path)
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    study._storage.set_study_user_attr(study._study_id, RESULT, None)
    result = autotune.load(path)
    assert not result.confirmed
    assert result.baseline is None
    assert result.settings.batch_size == 8


def test_a_study_from_a_newer_autotune_is_refused(saved_study: Path, tmp_path: Path) -> None:
    path = copy_of(saved_study, tmp_path)
    study = optuna.load_study(study_name="small", storage=f"sqlite:///{path}")
    study.set_user_attr("autotune", {**study.user_attrs["autotune"], "format": 99})
    with pytest.raises(StudyError, match="newer autotune \\(format 99"):
        autotune.load(path)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not an SQLite database"),
        (b"epoch,loss\n1,0.5\n", "not an SQLite database"),
        (b"SQLite format 3\x00" + b"\x13" * 2000, "corrupt or unreadable"),
    ],
)
def test_files_that_are_not_studies_are_refused_untouched(tmp_path, content, message) -> None:
    path = tmp_path / "bad.db"
    path.write_bytes(content)
    before = _digest(path)
    with pytest.raises(StudyError, match=message):
        open_study(path, "bad", create=True)
    assert _digest(path) == before


def test_an_sqlite_database_of_something_else_is_refused_untouched(tmp_path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE runs (id INTEGER)")
    before = _digest(path)
    with pytest.raises(StudyError, match="not a study \\(no Optuna tables\\)"):
        open_study(path, "other", create=True)
    assert _digest(path) == before


def test_a_missing_study_is_not_created_by_reading(tmp_path) -> None:
    with pytest.raises(StudyError, match="no study at"):
        autotune.load(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()
