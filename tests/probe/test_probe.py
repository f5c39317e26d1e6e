"""The probe: figures on workloads with known costs, and failures recorded with reasons."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import workloads
from faults import probe_request as request

from autotune.probe import run_probe
from autotune.probe._child import hold_batches
from autotune.settings import _allocator
from autotune.settings._settings import Settings
from autotune.space import OFF_CPU_SHARE


def test_known_per_item_cost_gives_the_expected_throughput() -> None:
    # 30 ms per item, no workers: at most 33 samples/s, nearly all of it waiting for data.
    # (Long enough per item that a step's own work, slower on a busy machine, stays small.)
    result = run_probe(request(workloads.SleepyDataset(delay=0.03)))
    assert result.ok, result.failure
    figures = result.figures
    assert len(figures.windows) == 3
    assert 22 < figures.samples_per_s < 34.5
    assert figures.fresh_per_s == pytest.approx(figures.samples_per_s)
    assert figures.wait_fraction > 0.7
    assert figures.startup_s is not None and 0.03 < figures.startup_s < 5
    assert figures.peak_memory_bytes and figures.peak_memory_bytes > 10 * 2**20


def test_workers_that_wait_on_io_multiply_throughput() -> None:
    # 30 ms of sleep per item, so that a step's own work, slower on a busy machine, stays small
    # beside the wait that workers hide (at 10 ms, a loaded CI machine read 1.96x).
    ds = workloads.SleepyDataset(delay=0.03)
    alone = run_probe(request(ds, window_seconds=0.4)).figures.samples_per_s
    four = Settings(batch_size=4, num_workers=4, prefetch_factor=2)
    result = run_probe(request(ds, settings=four, window_seconds=0.4))
    assert result.ok, result.failure
    # Four workers could make it 4x; twice is beyond any noise of a busy machine.
    assert result.figures.samples_per_s > 2 * alone


def test_echo_trains_on_each_batch_several_times() -> None:
    echo = Settings(batch_size=4, echo=3)
    result = run_probe(request(workloads.SleepyDataset(delay=0.01), settings=echo))
    assert result.ok, result.failure
    windows = result.figures.windows
    assert all(w.samples == 3 * w.fresh for w in windows)
    assert result.figures.samples_per_s > 2.5 * result.figures.fresh_per_s


def test_fast_data_is_not_waited_on() -> None:
    result = run_probe(request(workloads.SleepyDataset(delay=0.0), batch_size=64))
    assert result.ok, result.failure
    assert result.figures.wait_fraction < 0.9
    assert result.figures.samples_per_s > 500


def test_iterable_dataset_runs_across_epochs() -> None:
    result = run_probe(request(workloads.SleepyStream(length=16), window_seconds=0.1))
    assert result.ok, result.failure
    assert result.figures.samples > 16  # more than one epoch


def test_stopping_after_the_first_window_prunes_the_probe() -> None:
    seen = []

    def on_window(window, so_far):
        seen.append((window.index, so_far))
        return False

    result = run_probe(
        request(workloads.SleepyDataset(), max_windows=50, window_seconds=1.0),
        on_window=on_window,
    )
    assert result.ok
    assert result.stopped
    # The window under way when the stop arrives is abandoned at its next step.
    assert len(result.figures.windows) == 1
    assert [index for index, _ in seen] == [0]
    assert result.figures.wall_s < 10
    # The figures so far are whole: a remote pruner that kills the probe keeps them.
    so_far = seen[0][1]
    assert so_far.windows == result.figures.windows
    assert so_far.startup_s == result.figures.startup_s is not None
    assert so_far.peak_memory_bytes and so_far.wall_s > 0


def test_compute_mode_trains_on_held_batches_with_no_worker_alive() -> None:
    # 50 ms an item: the loader alone delivers about 80 samples/s. The model alone, on
    # batches held in memory, trains far faster, and the workers that filled them
    # (persistent ones too) are gone before it is measured: AloneModel raises otherwise.
    settings = Settings(batch_size=4, num_workers=2, prefetch_factor=2, persistent_workers=True)
    result = run_probe(
        request(
            workloads.SleepyDataset(delay=0.05),
            model=workloads.AloneModel,
            settings=settings,
            mode="compute",
        )
    )
    assert result.ok, result.failure
    # Trained from the loader, each step would wait about 0.1 s for its batch (2 workers,
    # 4 items of 50 ms a batch): most of the time. Not a rate bound, which the machine's
    # load decides (179 samples/s in a CI run while the other test process held both
    # cores, 79 with four test processes on two cores, against 40 from the loader).
    assert result.figures.wait_fraction < 0.05


def test_a_compute_probe_holds_fewer_batches_of_a_slow_dataset() -> None:
    now = [0.0]

    def loading(seconds: float) -> Callable[[], object]:
        def fetch() -> object:
            now[0] += seconds
            return object()

        return fetch

    def clock() -> float:
        return now[0]

    assert len(hold_batches(loading(0.001), clock)) == 8  # the most
    assert len(hold_batches(loading(0.2), clock)) == 3  # 0.6 s of loading: stop
    assert len(hold_batches(loading(2.0), clock)) == 2  # the fewest, however slow


def test_check_mode_describes_the_workload() -> None:
    result = run_probe(request(workloads.SleepyDataset(length=100), mode="check"))
    assert result.ok, result.failure
    info = result.info
    assert info["dataset_length"] == 100
    assert info["parameters"] == workloads.FEATURES * workloads.CLASSES + workloads.CLASSES
    assert info["batch"] == "list(Tensor[4,8] float32, Tensor[4] int64)"
    assert info["batch_bytes"] == 4 * 8 * 4 + 4 * 8


def test_check_mode_reads_how_much_of_a_core_the_step_keeps_busy() -> None:
    # A step that waits (as on an accelerator) against one that computes on the CPU.
    settings = Settings(batch_size=4, threads=1)
    waits = run_probe(
        request(workloads.SleepyDataset(), model=workloads.steady_model, mode="check",
                settings=settings)
    )  # fmt: skip
    computes = run_probe(request(workloads.SleepyDataset(), mode="check", settings=settings))
    assert waits.ok and computes.ok, (waits.failure, computes.failure)
    assert waits.info["step_s"] == pytest.approx(0.03, rel=0.5)  # steady_model's sleep
    # What the space's rule reads (OFF_CPU_SHARE), with room for a loaded machine.
    assert waits.info["step_cpu_share"] < OFF_CPU_SHARE / 2
    assert computes.info["step_cpu_share"] > OFF_CPU_SHARE * 1.5


@pytest.mark.skipif(sys.platform != "linux", reason="CPU affinity is Linux-only")
def test_cpu_affinity_and_threads_are_applied_in_the_probe() -> None:
    settings = Settings(batch_size=4, threads=1)
    result = run_probe(
        request(workloads.SleepyDataset(), cpus=(0,), mode="check", settings=settings)
    )
    assert result.ok, result.failure
    assert result.info["cpus"] == [0]
    assert result.info["torch_threads"] == 1


@pytest.mark.skipif(_allocator._glibc() is None, reason="glibc's malloc only")
def test_the_probe_trains_under_the_tuned_loader_s_allocator_rule() -> None:
    settings = Settings(batch_size=4)
    result = run_probe(request(workloads.SleepyDataset(), mode="check", settings=settings))
    assert result.ok, result.failure
    assert result.info["allocator"] == "fixed"
