"""A dataset that raises on some records: the configs that meet them fail with the
dataset's own error as their reason; when every config fails the same way, the search
stops early and shows that error once."""

from __future__ import annotations

import re

import pytest
from faults import DRIVERS, Case, drive

import autotune
from autotune.explore._fatal import FATAL_REPEATS


@pytest.mark.parametrize("driver", DRIVERS)
def test_configs_that_meet_bad_records_fail_with_the_datasets_error(
    driver, workdir, capsys
) -> None:
    outcome = drive(driver, Case(dataset="corrupt_in_workers_dataset"), workdir, capsys)
    assert outcome.code == 0, outcome.error
    trials = outcome.trials()
    failed = [t for t in trials if t.state == "FAIL"]
    assert failed
    for trial in failed:
        assert trial.settings.num_workers == 1  # the records only fail in workers
        assert trial.failure.kind == "error"
        assert trial.failure.piece == "loading a batch (dataset)"
        assert re.fullmatch(
            r"ValueError: corrupt record \d+ \(in DataLoader worker process 0\)",
            trial.failure.message,
        )
    assert autotune.load(outcome.study).settings.num_workers == 0
    if driver == "cli":
        assert "FAILED (error): ValueError: corrupt record" in outcome.stderr


@pytest.mark.parametrize("driver", DRIVERS)
def test_the_same_failure_everywhere_stops_the_search_with_that_error_once(
    driver, workdir, capsys
) -> None:
    # Its first batch is fine (the preflight passes); then every config meets bad records.
    case = Case(
        dataset="failing_after_dataset",
        batch_size=4,
        space={"num_workers": 0, "batch_size": [4, 8, 16, 32], "threads": [1, 2]},
        options={"trials": 10},
    )
    outcome = drive(driver, case, workdir, capsys)
    assert outcome.code == 2
    assert re.search(
        r"every config failed the same way: loading a batch \(dataset\): "
        r"ValueError: corrupt record \d+$",
        outcome.error,
    )
    assert outcome.error.count("corrupt record") == 1
    trials = outcome.trials()
    assert len(trials) == FATAL_REPEATS  # stopped early, not after the 10 trials asked for
    assert all(t.state == "FAIL" for t in trials)
