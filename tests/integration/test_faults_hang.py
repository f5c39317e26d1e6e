"""A dataset or a collate_fn that hangs: the trial is killed at its timeout, recorded,
and the search goes on; once configs with workers have shown that their workers hang,
without them."""

from __future__ import annotations

from pathlib import Path

import pytest
import workloads
from conftest import quick
from faults import SMALL_SPACE, Case, drive, probe_request, study_trials
from messages import Messages

import autotune
from autotune.explore._hangs import HUNG_CONFIGS
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


def test_once_two_configs_hung_in_their_workers_the_search_goes_on_without_workers(
    workdir,
) -> None:
    lines: list[str] = []
    result = autotune.search(
        dataset=workloads.hang_in_workers_dataset,
        model=workloads.linear_model,
        batch_size=8,
        space={**SMALL_SPACE, "num_workers": [0, 1, 2], "batch_size": [8, 16]},
        name="hang",
        progress=Messages(lines),
        **quick(trials=6, trial_timeout=3.0, max_windows=2, seed=0, finalists=1, ceilings=True),
    )
    trials = study_trials(Path(result.study_path))
    hung = [t for t in trials if t.failure is not None and t.failure.kind == "timeout"]
    # Four configs of the space have workers, and each would hang: two prove it.
    assert len(hung) == HUNG_CONFIGS
    assert all(t.settings.num_workers > 0 for t in hung)
    ruling = f"trials #{hung[0].number} and #{hung[1].number} hung in DataLoader workers"
    assert [line for line in lines if line.startswith(ruling)] == [
        f"{ruling} (no first batch within 3 s) and no config with as many workers delivered "
        "a batch: configs with workers would hang the same way, so the search goes on "
        "without workers"
    ]
    later = [t for t in trials if t.number > hung[-1].number and t.probed]
    assert later and all(t.settings.num_workers == 0 for t in later)
    assert result.settings.num_workers == 0
    # Nor does the loader limit wait out the timeout with the space's most workers.
    assert result.loader_limit is not None and result.loader_limit.settings.num_workers == 0
    assert not [line for line in lines if "not measured" in line]
