"""Device figures per trial: NVML through a stand-in, CPU per core through psutil, for real."""

from __future__ import annotations

import os
import pickle
import time

import fake_nvml
import pytest
import workloads
from fake_nvml import FakeGpu

from autotune.machine import Monitor, MonitorFigures
from autotune.probe import Figures, ProbeRequest, WorkloadSource, run_probe
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
