"""Device figures per trial: NVML through a stand-in, CPU per core through psutil, for real."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from typing import Any

import fake_nvml
import psutil
import pytest
import workloads
from fake_nvml import FakeGpu

from autotune.machine import Monitor, MonitorFigures
from autotune.probe import Figures, ProbeRequest, WorkloadSource, _memory_watch, run_probe
from autotune.settings import Settings
from autotune.workload import Workload

UUID = "GPU-aaaa1111-0000-0000-0000-000000000000"


def test_gpu_figures_are_means_and_peaks_of_the_samples(monkeypatch) -> None:
    gpu = FakeGpu(name="A100", uuid=UUID, utilization=87, memory_used=5 * 2**30)
    fake_nvml.install(monkeypatch, [gpu])
    monitor = Monitor(gpus=[UUID], cores=[0], interval=0.01)
    time.sleep(0.1)
    monitor.stop()
    figures = monitor.figures()
    assert figures.gpu_absent is None
    (one,) = figures.gpus
    assert one.uuid == UUID
    assert one.utilization_percent == 87
    assert one.memory_used_bytes == 5 * 2**30
    assert len(gpu.temperatures) >= 3
    assert one.temperature_c == max(gpu.temperatures)  # the peak, not the mean
    assert one.power_w == 250.0 and one.power_peak_w == 250.0
    assert one.missing == {}
    assert figures.cores == (0,) and len(figures.cpu_percent) == 1


def test_a_figure_the_gpu_does_not_report_is_absent_with_the_reason(monkeypatch) -> None:
    fake_nvml.install(monkeypatch, [FakeGpu(name="T4", uuid=UUID, power_mw=None)])
    monitor = Monitor(gpus=[UUID], cores=None, interval=0.01)
    monitor.stop()
    (one,) = monitor.figures().gpus
    assert one.power_w is None and one.power_peak_w is None
    assert one.missing == {"power": "NVML: Not Supported"}
    assert one.utilization_percent == 50


def test_without_nvml_gpu_figures_are_absent_with_the_reason_never_zeros(monkeypatch) -> None:
    fake_nvml.uninstall_nvml(monkeypatch, "NVML Shared Library Not Found")
    monitor = Monitor(gpus=[UUID], cores=None, interval=0.01)
    monitor.stop()
    figures = monitor.figures()
    assert figures.gpus == ()
    assert figures.gpu_absent == "NVML unavailable: NVML Shared Library Not Found"
    assert MonitorFigures.from_dict(figures.to_dict()) == figures


def test_an_unknown_gpu_is_absent_with_nvmls_answer(monkeypatch) -> None:
    fake_nvml.install(monkeypatch, [])
    monitor = Monitor(gpus=[UUID], cores=None)
    monitor.stop()
    assert monitor.figures().gpu_absent == "NVML cannot find the probe's GPU: Not Found"


def request(**fields) -> ProbeRequest:
    workload = Workload(dataset=workloads.SleepyDataset(), model=workloads.linear_model)
    return ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=Settings(batch_size=16, threads=1),
        device="cpu",
        window_seconds=0.2,
        max_windows=3,
        warmup_seconds=0.05,
        stall_timeout=20.0,
        **fields,
    )


def test_a_probe_records_its_gpus_and_cores_over_its_windows(monkeypatch) -> None:
    # The probe trains on CPU for real; NVML answers for "its GPU" through the stand-in.
    gpu = FakeGpu(name="A100", uuid=UUID, utilization=93)
    fake_nvml.install(monkeypatch, [gpu])
    result = run_probe(request(monitor_gpus=(UUID,), cpus=(0,)))
    assert result.ok, result.failure
    monitor = result.figures.monitor
    assert monitor is not None
    assert monitor.gpus[0].utilization_percent == 93
    assert monitor.gpus[0].temperature_c is not None
    assert monitor.cores == (0,)
    # The figures cover the measuring windows (not the start-up before them).
    assert monitor.seconds == pytest.approx(result.figures.seconds, rel=0.5)
    # Stored with the trial's figures.
    assert Figures.from_dict(result.figures.to_dict()).monitor == monitor


def test_a_cpu_probe_has_cpu_figures_per_core_and_says_why_no_gpu_ones() -> None:
    result = run_probe(request())
    assert result.ok, result.failure
    monitor = result.figures.monitor
    assert monitor is not None
    assert monitor.gpus == () and monitor.gpu_absent == "the probe trained on CPU"
    assert monitor.cores == tuple(sorted(os.sched_getaffinity(0)))
    assert len(monitor.cpu_percent) == len(monitor.cores)
    assert all(0 <= p <= 100 for p in monitor.cpu_percent)
    assert max(monitor.cpu_percent) > 0  # the probe was training on one of them


# ----------------------------------------------------------------- processes that vanish
def test_a_probe_whose_processes_cannot_be_read_still_reports_its_windows(monkeypatch) -> None:
    # Every process the search would read has ended by the time it reads it (a probe that
    # is over before its watch starts, on a busy machine): the probe's windows still count.
    def vanished(pid: int | None = None) -> psutil.Process:
        raise psutil.NoSuchProcess(pid or 0)

    monkeypatch.setattr(psutil, "Process", vanished)
    result = run_probe(request())
    assert result.ok, result.failure
    assert len(result.figures.windows) == 3
    assert result.figures.peak_memory_bytes is None  # nothing read: no figure, not a zero
    assert result.figures.monitor is not None


def test_the_memory_watch_carries_on_when_a_process_ends_between_listing_and_reading(
    monkeypatch,
) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watch = _memory_watch.TreeWatch(os.getpid(), limit=None, interval=3600)
    try:
        listed = watch._processes(fresh=True)
        assert child.pid in {process.pid for process in listed}
        child.kill()
        child.wait()  # reaped: its pid is gone, though the watch listed it
        assert watch._processes() == listed
        assert watch.sample(force=True) > 0  # the others are read; the ended one adds nothing
        assert watch.peak > 0
    finally:
        watch.stop()


@pytest.mark.parametrize(
    "error",
    [psutil.NoSuchProcess(1), psutil.ZombieProcess(1), psutil.AccessDenied(1)],
    ids=["no-such-process", "zombie", "access-denied"],
)
def test_the_memory_watch_carries_on_when_a_read_meets_an_ended_process(
    monkeypatch, error: psutil.Error
) -> None:
    def fails(process: psutil.Process, *args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(psutil.Process, "memory_info", fails)
    monkeypatch.setattr(psutil.Process, "memory_full_info", fails)
    monkeypatch.setattr(psutil.Process, "children", fails)
    watch = _memory_watch.TreeWatch(os.getpid(), limit=None, interval=3600)
    try:
        assert watch.sample(force=True) == 0
        watch.collect()
        assert os.getpid() in watch.pids
    finally:
        watch.stop()


def test_a_memory_watch_of_a_process_already_gone_reads_nothing_and_keeps_its_pid() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    watch = _memory_watch.TreeWatch(child.pid, limit=None, interval=3600)
    try:
        assert watch.sample(force=True) == 0
        assert watch.peak == 0
        watch.collect()
        watch.kill_all()
        assert watch.pids == [child.pid]  # what it left in /dev/shm is still looked for
    finally:
        watch.stop()
