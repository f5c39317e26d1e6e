"""The device's busy share, measured on a GPU, printed next to the wait share: in the
diagnosis, the report and ``autotune show``. On the CPU nothing new is said.

The GPU is faked at its figures: windows that carry the device's busy time (as the
probe's CUDA events give it), or NVML's utilisation from the search's monitor."""

from __future__ import annotations

import pytest

from autotune import Machine, Measurement, SearchResult, Settings
from autotune.decide._diagnosis import Context, diagnose, diagnose_config
from autotune.machine._monitor import GpuFigures, MonitorFigures
from autotune.output._report._html import _card
from autotune.output._report._markdown import _diagnosis_section
from autotune.output._show import diagnosis_lines, result_lines, show_json
from autotune.probe import Figures, Window

SETTINGS = Settings(batch_size=32, num_workers=4, prefetch_factor=2)


def windows(device_seconds: float | None) -> tuple[Window, ...]:
    """Three windows of 2 s, waiting 0.5 s of each, busy ``device_seconds`` of each."""
    return tuple(
        Window(
            index=i,
            seconds=2.0,
            samples=640,
            fresh=640,
            steps=20,
            wait_seconds=0.5,
            device_seconds=device_seconds,
        )
        for i in range(3)
    )


def nvml(*percents: float | None) -> MonitorFigures:
    return MonitorFigures(
        seconds=6.0,
        samples=30,
        gpus=tuple(
            GpuFigures(uuid=f"GPU-{i}", utilization_percent=p) for i, p in enumerate(percents)
        ),
    )


ON_GPU = Figures(windows=windows(1.6))
ON_CPU = Figures(windows=windows(None), monitor=MonitorFigures(seconds=6.0, samples=30))


def test_the_busy_share_is_the_devices_own_clock_over_the_windows() -> None:
    assert ON_GPU.device_busy_fraction == pytest.approx(0.8)
    assert ON_GPU.to_dict()["device_busy_fraction"] == pytest.approx(0.8)
    assert Figures.from_dict(ON_GPU.to_dict()).windows == ON_GPU.windows


def test_without_the_devices_clock_the_busy_share_is_nvmls_utilisation() -> None:
    # A DDP probe's windows carry no device time; the monitor read both GPUs.
    figures = Figures(windows=windows(None), monitor=nvml(70.0, 90.0, None))
    assert figures.device_busy_fraction == pytest.approx(0.8)
    # The device's own clock wins over NVML's coarser sampling.
    both = Figures(windows=windows(1.0), monitor=nvml(90.0))
    assert both.device_busy_fraction == pytest.approx(0.5)


@pytest.mark.parametrize(
    "figures",
    [ON_CPU, Figures(windows=windows(None)), Figures(windows=windows(None), monitor=nvml(None))],
    ids=["cpu-monitor", "no-monitor", "nvml-unreadable"],
)
def test_on_the_cpu_there_is_no_busy_share(figures: Figures) -> None:
    assert figures.device_busy_fraction is None


def measured(figures: Figures) -> Measurement:
    return Measurement(settings=SETTINGS, figures=figures)


def test_the_diagnosis_prints_the_busy_share_next_to_the_wait_share() -> None:
    diagnosis = diagnose_config("best", measured(ON_GPU), context=Context(device="cuda:0"))
    assert diagnosis.device_busy_share == pytest.approx(0.8)
    assert "waiting for data 25% of each step, device busy 80%" in diagnosis.headline()
    assert "device busy 80%" in diagnosis_lines([diagnosis])[0]
    assert "| waiting for data | 25% of each step |\n| device busy | 80% of each step |" in (
        "\n".join(_diagnosis_section(diagnosis))
    )
    assert '<td>device busy</td><td class="n">80% of each step</td>' in _card(diagnosis)


def test_on_the_cpu_the_diagnosis_says_nothing_new() -> None:
    diagnosis = diagnose_config("best", measured(ON_CPU), context=Context(device="cpu"))
    assert diagnosis.device_busy_share is None
    assert "busy" not in diagnosis.headline()
    assert "busy" not in "\n".join(_diagnosis_section(diagnosis))
    assert "busy" not in _card(diagnosis)


def result_on(figures: Figures, baseline: Figures, device: str) -> SearchResult:
    return SearchResult(
        settings=SETTINGS,
        figures=figures,
        baseline=Measurement(settings=Settings(batch_size=32), figures=baseline),
        device=device,
        machine=Machine(
            cpus=16, cpu_model="x", memory_bytes=2**34, shm_bytes=None, accelerator="cuda"
        ),
    )


def test_show_prints_the_busy_share_of_the_best_and_of_the_default() -> None:
    default = Figures(windows=windows(None), monitor=nvml(40.0))
    result = result_on(ON_GPU, default, "cuda:0")
    lines = result_lines(result)
    assert "waiting for data 25% of the time, device busy 80%" in lines[1]
    (line,) = [line for line in lines if line.startswith("default DataLoader")]
    assert line.endswith("waiting for data 25% of the time, device busy 40%")
    shown = show_json(result, diagnose(result), None)
    assert shown["result"]["default"]["device_busy_fraction"] == pytest.approx(0.4)
    best, of_default = shown["diagnosis"]
    assert best["device_busy_share"] == pytest.approx(0.8)
    assert of_default["device_busy_share"] == pytest.approx(0.4)
    assert best["wait_share"] + best["copy_share"] <= 1.0


def test_show_on_the_cpu_says_nothing_new() -> None:
    result = result_on(ON_CPU, ON_CPU, "cpu")
    assert not any("busy" in line for line in result_lines(result))
    shown = show_json(result, diagnose(result), None)
    assert shown["diagnosis"][0]["device_busy_share"] is None
