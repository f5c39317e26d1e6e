"""Saved studies: where they go, what is refused, and loading settings back."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import workloads
from conftest import copy_of

import autotune
from autotune import StudyError
from autotune.study._study import RESULT, resolve


def test_resolve_names_and_paths() -> None:
    assert resolve(None, "quickstart") == (Path("studies/quickstart.db"), "quickstart")
    assert resolve("mine", "x") == (Path("studies/mine.db"), "mine")
    assert resolve("out/run.db", "x") == (Path("out/run.db"), "run")
    assert resolve("/abs/a.db", "x") == (Path("/abs/a.db"), "a")


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
    study._storage.set_study_user_attr(study._study_id, RESULT, None)
    result = autotune.load(path)
    assert not result.confirmed
    assert result.baseline is None
    assert result.settings.batch_size in (8, 16)


def test_a_missing_study_is_not_created_by_reading(tmp_path) -> None:
    with pytest.raises(StudyError, match="no study at"):
        autotune.load(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()
