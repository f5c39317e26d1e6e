"""Configs measured in turns in one probe process: each its own windows, start-up and
failure; the workers of the config before a turn idle first."""

from __future__ import annotations

import itertools

import pytest
import workloads
from faults import probe_request as request

from autotune.probe import run_probe
from autotune.probe._turns import IDLE_SHARE, settle
from autotune.settings import Settings

NO_WORKERS = Settings(batch_size=4)
FOUR_WORKERS = Settings(batch_size=4, num_workers=4, prefetch_factor=2, persistent_workers=True)


def test_each_config_gets_its_windows_and_start_and_the_faster_loader_reads_faster() -> None:
    # 20 ms of sleep per item: four workers load about 4x what none do, whatever the CPUs.
    turns = (NO_WORKERS, FOUR_WORKERS)
    result = run_probe(request(workloads.SleepyDataset(delay=0.02), settings=turns[0], turns=turns))
    assert result.ok, result.failure
    alone, four = result.turns
    assert alone.ok and four.ok
    assert len(alone.figures.windows) == len(four.figures.windows) == 3
    assert alone.figures.startup_s is not None and four.figures.startup_s is not None
    # Each its own figures: samples of batch 4, rates near what each loader delivers.
    assert all(w.samples % 4 == 0 for w in (*alone.figures.windows, *four.figures.windows))
    assert alone.figures.samples_per_s < 55
    assert four.figures.samples_per_s > 2 * alone.figures.samples_per_s
    # The whole probe holds every window, and the memory of all the loaders together.
    assert len(result.figures.windows) == 6
    assert result.figures.peak_memory_bytes and alone.figures.peak_memory_bytes is None


def test_a_config_that_fails_alone_leaves_the_others_measured() -> None:
    # Records that raise only in a worker: the loader with workers fails, the other goes on.
    turns = (FOUR_WORKERS, NO_WORKERS)
    result = run_probe(
        request(workloads.CorruptInWorkersDataset(delay=0.0), settings=turns[0], turns=turns)
    )
    assert result.ok, result.failure
    broken, fine = result.turns
    assert broken.failure is not None and "corrupt record" in broken.failure.message
    assert fine.ok and len(fine.figures.windows) == 3


def test_a_failure_of_the_whole_process_is_every_unfinished_configs() -> None:
    # The process crashes (SIGSEGV) after 8 items, in the first config's first turn.
    turns = (NO_WORKERS, Settings(batch_size=4, threads=1))
    result = run_probe(request(workloads.SegfaultDataset(after=8), settings=turns[0], turns=turns))
    assert result.failure is not None and result.failure.kind == "crash"
    assert all(part.failure is result.failure for part in result.turns)


def test_compute_turns_measure_each_combination_on_held_batches() -> None:
    combos = (Settings(batch_size=4, threads=1), Settings(batch_size=16, threads=1))
    result = run_probe(
        request(
            workloads.instant_dataset(),
            model=workloads.steady_model,
            settings=combos[0],
            turns=combos,
            mode="compute",
            max_windows=2,
        )
    )
    assert result.ok, result.failure
    small, large = result.turns
    # Every forward takes 30 ms whatever the batch: batch 16 trains 4x as fast as 4.
    assert large.figures.samples_per_s / small.figures.samples_per_s == pytest.approx(4, rel=0.25)
    assert all(part.figures.wait_fraction < 0.05 for part in result.turns)


def test_settle_waits_for_the_workers_to_idle_and_no_longer_than_its_limit() -> None:
    clock = itertools.count(0.0, 0.02)
    # Busy for three reads (a core each), then idle.
    readings = iter([0.0, 0.02, 0.04, 0.06, 0.06 + IDLE_SHARE * 0.02 / 2, 1.0])
    waited = settle(clock=lambda: next(clock), sleep=lambda s: None, cpu=lambda: next(readings))
    assert waited == pytest.approx(0.1)
    # Never idle: it gives up after most_s.
    busy = itertools.count(0.0, 0.02)
    clock = itertools.count(0.0, 0.02)
    waited = settle(
        most_s=0.2, clock=lambda: next(clock), sleep=lambda s: None, cpu=lambda: next(busy)
    )
    assert 0.2 <= waited < 0.3
