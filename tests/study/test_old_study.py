"""A study written by autotune 0.1.0, before the package was laid out by stage, still
opens, shows, loads, exports and resumes (tests/data/study_v0_1.db, made by
``autotune search tests/data/study_v0_1_config.py --trials 4 --seed 0`` at 0125bfc)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from conftest import TESTS

import autotune
from autotune.cli import main
from autotune.machine import detect_machine, usable_cpus
from autotune.study import Attr, locate, open_study, records

DATA = TESTS / "data"
OLD_STUDY = DATA / "study_v0_1.db"
OLD_CONFIG = DATA / "study_v0_1_config.py"


@pytest.fixture
def old_study(workdir: Path) -> Path:
    """A copy of the old study in the test's directory (the original stays untouched)."""
    copy = workdir / OLD_STUDY.name
    shutil.copyfile(OLD_STUDY, copy)
    return copy


def test_show_prints_what_0_1_0_printed(
    old_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", old_study.name]) == 0
    # The figures and settings are 0.1.0's; the advice is worded as this version words
    # it (the winner without workers is no longer told that workers would help, since
    # that search trained 1 worker and found it slower).
    expected = (DATA / "study_v0_1.show.txt").read_text()
    assert capsys.readouterr().out == expected


def test_load_reads_the_saved_result(old_study: Path) -> None:
    result = autotune.load(old_study, check_machine=False)
    assert result.confirmed
    assert (result.settings.num_workers, result.settings.batch_size) == (0, 32)
    assert result.baseline is not None and result.baseline.settings.batch_size == 16
    assert result.samples_per_s == pytest.approx(98_194, rel=1e-3)
    assert set(result.ceilings) == {"compute", "data"}
    assert result.loader_limit is not None
    assert result.search_time is None  # written before the time was kept


def test_export_writes_the_same_settings(old_study: Path) -> None:
    out = old_study.with_suffix(".json")
    assert main(["export", old_study.name, "-o", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert exported["dataloader"] == {"batch_size": 32, "num_workers": 0, "pin_memory": False}
    assert exported["speedup"] == pytest.approx(98_194 / 40_746, rel=1e-3)


def test_records_read_every_trial(old_study: Path) -> None:
    study = open_study(locate(old_study, None, name=old_study.stem), create=False)
    trials = records(study)
    assert [r.role for r in trials] == ["explore"] * 4 + ["confirm", "baseline"]
    assert [r.state for r in trials[:4]] == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED"]
    assert all(r.measurement is not None for r in trials)


def test_a_search_resumes_it(old_study: Path) -> None:
    # The study was written on another machine than the one this test may run on: a
    # search refuses to mix figures across machines (tested in test_faults_study), so
    # the copy is first told it was measured here. Only the fingerprint changes.
    study = open_study(locate(old_study, None, name=old_study.stem), create=False)
    meta = dict(study.user_attrs[Attr.META])
    meta["machine"] = detect_machine(None).to_dict()
    meta["placement"] = {**meta["placement"], "rank_cpus": usable_cpus()}
    study.set_user_attr(Attr.META, meta)
    before = len(study.trials)

    # One confirming round: resuming, not the rounds, is what this checks.
    resume = ["--study", old_study.name, "--trials", "1", "--rounds", "1"]
    code = main(["search", str(OLD_CONFIG), *resume])

    assert code == 0
    study = optuna.load_study(study_name=old_study.stem, storage=f"sqlite:///{old_study}")
    assert len([t for t in study.trials if t.number >= before]) >= 2  # explore + confirm
    assert autotune.load(old_study, check_machine=False).settings.batch_size in (16, 32)


def test_show_json_gives_the_settings_figures_and_diagnosis(
    old_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", old_study.name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    chosen = data["result"]
    assert chosen["dataloader"] == {"batch_size": 32, "num_workers": 0, "pin_memory": False}
    assert chosen["confirmed"] is True and chosen["caveat"] is None
    assert chosen["samples_per_s"] == pytest.approx(98_194, rel=1e-3)
    assert chosen["default"]["samples_per_s"] == pytest.approx(40_746, rel=1e-3)
    assert chosen["speedup"] == pytest.approx(98_194 / 40_746, rel=1e-3)
    assert chosen["interval"] is None  # a study from before the rounds
    assert chosen["search_time"] is None  # and from before its time was kept
    assert [d["subject"] for d in data["diagnosis"]] == ["best", "default loader"]
    assert data["diagnosis"][0]["verdict"] == "data-bound"
    assert data["study"]["name"] == "study_v0_1"


def test_show_piped_into_head_ends_quietly(old_study: Path) -> None:
    shell = f"{sys.executable} -m autotune show {old_study.name} | head -n 1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell],
        cwd=old_study.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.startswith("study 'study_v0_1'")
    # Nothing but the warning a study from another machine's CPU gets (the fixture's
    # study was made on an Intel machine; this one may be another): no broken pipe.
    said = [line for line in done.stderr.splitlines() if "tuned on another machine" not in line]
    assert said == []
    assert done.returncode in (0, 141)  # 141: the shell's code for a closed pipe
