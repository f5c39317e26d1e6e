"""A process dies: a DataLoader worker killed or crashing (SIGSEGV), or the probe itself.
The trial fails with the reason recorded, and no process is left behind (the autouse
fixtures check every test for leftover processes, orphans included)."""

from __future__ import annotations

import re

import pytest
import workloads
from faults import Case, drive, probe_request

import autotune
from autotune.probe import ProbeResult, run_probe
from autotune.settings import Settings

WITH_WORKERS = Settings(batch_size=4, num_workers=2, prefetch_factor=2)


def probe(dataset, settings: Settings) -> ProbeResult:
    return run_probe(probe_request(dataset, settings=settings, window_seconds=0.1))


@pytest.mark.parametrize(
    ("death", "reason"),
    [
        ("kill", r"(is killed by signal: Killed|exited unexpectedly)"),
        ("segfault", r"(is killed by signal: Segmentation fault|exited unexpectedly)"),
    ],
)
def test_a_worker_that_dies_fails_the_probe_with_the_reason(death, reason) -> None:
    result = probe(workloads.DyingWorkerDataset(death), WITH_WORKERS)
    assert result.failure is not None
    assert result.failure.kind == "worker"
    assert re.search(r"DataLoader worker \(pid", result.failure.message)
    assert re.search(reason, result.failure.message)


@pytest.mark.parametrize(
    ("dataset", "reason"),
    [
        (
            workloads.SuicidalDataset(),
            "killed by SIGKILL from outside (not by the kernel's out-of-memory killer)",
        ),
        (
            workloads.SegfaultDataset(),
            "crashed with SIGSEGV: a segmentation fault in native code",
        ),
    ],
)
def test_a_probe_that_dies_fails_with_the_signal_named(dataset, reason) -> None:
    result = probe(dataset, Settings(batch_size=4))
    assert result.failure is not None
    assert result.failure.kind == "crash"
    assert reason in result.failure.message


@pytest.mark.parametrize(("driver", "death"), [("cli", "segfault"), ("api", "kill")])
def test_a_search_records_dying_workers_and_goes_on(driver, death, workdir, capsys) -> None:
    dataset = {"kill": "worker_killed_dataset", "segfault": "worker_segfault_dataset"}[death]
    outcome = drive(driver, Case(dataset=dataset), workdir, capsys)
    assert outcome.code == 0, outcome.error
    trials = outcome.trials()
    failed = [t for t in trials if t.state == "FAIL"]
    assert failed
    for trial in failed:
        assert trial.settings.num_workers == 1
        assert trial.failure.kind == "worker"
        assert "DataLoader worker (pid" in trial.failure.message
    assert autotune.load(outcome.study).settings.num_workers == 0


def test_a_crash_in_every_config_stops_the_search_naming_the_signal(workdir, capsys) -> None:
    case = Case(
        dataset="segfault_after_dataset",
        batch_size=4,
        space={"num_workers": 0, "batch_size": [4, 8, 16], "threads": [1, 2]},
        options={"trials": 6},
    )
    outcome = drive("cli", case, workdir, capsys)
    assert outcome.code == 2
    assert "every config failed the same way: the probe process crashed with SIGSEGV" in (
        outcome.error
    )
