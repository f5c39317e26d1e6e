"""A dataset or a collate_fn that hangs: the trial is killed at its timeout, recorded,
and the search goes on."""

from __future__ import annotations

import pytest
import workloads
from faults import Case, drive, probe_request

import autotune
from autotune.probe import run_probe


def test_a_dataset_hanging_in_the_probe_itself_is_killed_at_the_timeout() -> None:
    request = probe_request(workloads.HangingDataset(after=2), stall_timeout=1.5)
    result = run_probe(request)
    assert result.failure is not None
    assert result.failure.kind == "timeout"
    assert "hangs" in result.failure.message
    assert result.figures.wall_s < 15


@pytest.mark.parametrize(
    ("driver", "case"),
    [
        ("cli", Case(collate_fn="collate_hanging_in_workers", options={"trial_timeout": 1.5})),
        ("api", Case(dataset="hang_in_workers_dataset", options={"trial_timeout": 1.5})),
    ],
    ids=["cli-collate_fn", "api-dataset"],
)
def test_a_hang_is_killed_at_the_trial_timeout_and_the_search_goes_on(
    driver, case, workdir, capsys
) -> None:
    outcome = drive(driver, case, workdir, capsys)
    assert outcome.code == 0, outcome.error
    trials = outcome.trials()
    hung = [t for t in trials if t.state == "FAIL"]
    assert hung
    for trial in hung:
        assert trial.settings.num_workers == 1  # it only hangs in workers
        assert trial.failure.kind == "timeout"
        assert trial.failure.message.startswith(
            "no first batch within 1.5 s: the dataset, collate_fn or a worker hangs"
        )
        assert trial.figures.wall_s < 10
    assert autotune.load(outcome.study).settings.num_workers == 0
