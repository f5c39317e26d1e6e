"""The checker on the simulated accelerator: the device's reading per measurement, the
data ceiling, and the busy target of the generalisation benchmark (judged on made-up
figures on both sides of its bound)."""

from __future__ import annotations

import os
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from autotune.settings._settings import Settings
from benchmarks.common import _checker, _device_limits
from benchmarks.generalise import _rounds as _generalise_rounds
from benchmarks.generalise._device import assess_device, busy_verdict, device_lines
from benchmarks.generalise._rounds import RoundsOptions, measure_rounds
from benchmarks.simdevice import DeviceSpec

ROOT = Path(__file__).resolve().parents[2]
SPEC = DeviceSpec(launch_s=0.002, sample_s=0.0005)

SIM_CONFIG = textwrap.dedent(
    f"""
    import sys
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    sys.path.insert(0, {str(ROOT)!r})
    from benchmarks.simdevice import DeviceSpec, SimulatedModel

    batch_size = 8
    device = "cpu"

    def dataset():
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(256, 4, generator=generator)
        return TensorDataset(inputs, torch.randint(0, 3, (256,), generator=generator))

    def model():
        return SimulatedModel(nn.Linear(4, 3), {SPEC!r})
    """
)
PLAIN_CONFIG = SIM_CONFIG.replace(f"SimulatedModel(nn.Linear(4, 3), {SPEC!r})", "nn.Linear(4, 3)")


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.py"
    path.write_text(text)
    return path


def test_the_checker_reads_the_simulated_device_over_the_timed_part(tmp_path) -> None:
    config = _config(tmp_path, SIM_CONFIG)
    readings: list[dict[str, Any]] = []
    rate = _checker.measure(
        config, Settings(batch_size=8), seconds=0.3, warmup=0.1, readings=readings
    )
    assert rate > 0
    [reading] = readings
    assert reading["ceiling"] == pytest.approx(SPEC.ceiling(8, amp=False))
    # Both ends follow a synchronize: the device cannot have been busy longer than the span.
    assert 0 < reading["busy_s"] <= reading["wall_s"] + 1e-6
    assert reading["utilisation"] == pytest.approx(reading["busy_s"] / reading["wall_s"])


def test_a_config_on_two_ranks_is_measured_on_two_processes_each_with_its_device(
    tmp_path,
) -> None:
    config = _config(tmp_path, SIM_CONFIG + '\nsearch = {"ranks": 2}\n')
    assert _checker.config_ranks(config) == 2
    answer = _checker.measure_answer(config, Settings(batch_size=8), steps=6, warmup=0.0)
    assert answer["samples_per_s"] > 0
    reading = answer["device"]
    assert reading["ceiling"] == pytest.approx(2 * SPEC.ceiling(8, amp=False))  # two devices
    # Each rank's device ran 6 timed steps of its own: its busy time, not both ranks'.
    assert reading["busy_s"] == pytest.approx(6 * SPEC.step_seconds(8, amp=False))
    assert 0 < reading["utilisation"] <= 1.0 + 1e-6


def test_a_rank_that_fails_fails_the_measurement_with_its_error(tmp_path) -> None:
    failing = SIM_CONFIG.replace(
        "def model():\n",
        "def model():\n"
        "    import torch.distributed as dist\n"
        "    if dist.get_rank() == 1:\n"
        "        raise RuntimeError('no model on rank 1')\n",
    )
    config = _config(tmp_path, failing + '\nsearch = {"ranks": 2}\n')
    with pytest.raises(_checker.CheckerError, match="rank 1: RuntimeError: no model on rank 1"):
        _checker.measure(config, Settings(batch_size=8), steps=4, warmup=0.0)


def test_a_config_naming_no_ranks_trains_on_one_and_a_bad_count_is_refused(tmp_path) -> None:
    assert _checker.config_ranks(_config(tmp_path, PLAIN_CONFIG)) == 1
    bad = tmp_path / "bad.py"
    bad.write_text(PLAIN_CONFIG + '\nsearch = {"ranks": "two"}\n')
    with pytest.raises(ValueError, match="expected an integer >= 1"):
        _checker.config_ranks(bad)


def test_the_checker_reads_no_device_off_the_simulated_one(tmp_path) -> None:
    config = _config(tmp_path, PLAIN_CONFIG)
    answer = _checker.measure_answer(config, Settings(batch_size=8), seconds=0.2, warmup=0.0)
    assert answer["samples_per_s"] > 0 and answer["device"] is None


def test_the_data_ceiling_counts_the_cpu_seconds_of_loading_in_one_process(tmp_path) -> None:
    config = _config(tmp_path, PLAIN_CONFIG)
    plan = {"config": str(config), "batch_size": 8, "seconds": 0.05}
    found = _device_limits.load(plan)
    assert found["samples"] >= _device_limits.MIN_BATCHES * 8
    assert found["cpu_s"] > 0 and found["cpus"] == len(os.sched_getaffinity(0))


def test_the_limit_is_the_lower_ceiling_and_the_busy_bound_the_data_share() -> None:
    assert _device_limits.physical_limit(1000.0, 400.0) == 400.0
    assert _device_limits.busy_bound(1000.0, 400.0) == pytest.approx(0.4)
    assert _device_limits.busy_bound(1000.0, 5000.0) == 1.0


def test_the_rounds_keep_each_measurements_device_reading(monkeypatch) -> None:
    def measure(config: Path, settings: Settings, **options: Any) -> float:
        options["readings"].append({"utilisation": 0.1 * settings.num_workers, "ceiling": 9.0})
        return 100.0

    monkeypatch.setattr(_generalise_rounds, "measure", measure)
    monkeypatch.setattr(_generalise_rounds, "time", types.SimpleNamespace(perf_counter=lambda: 0))
    configs = [Settings(batch_size=8, num_workers=n, prefetch_factor=2) for n in (1, 2)]
    measured = measure_rounds(Path("x.py"), configs, RoundsOptions(rounds=2), "cpu", lambda _: None)
    assert [[r["utilisation"] for r in rounds] for rounds in measured.devices] == [
        [0.1, 0.1],
        [0.2, 0.2],
    ]


def _row(describe: str, median: float, busy: float, ceiling: float, seeds=()) -> dict[str, Any]:
    reading = {"utilisation": busy, "ceiling": ceiling}
    return {
        "describe": describe,
        "median": median,
        "seeds": list(seeds),
        "device_readings": [reading, reading, reading],
    }


@pytest.mark.parametrize(
    ("busy", "data_ceiling", "passed"),
    [
        (0.96, 10_000.0, True),  # device-bound: the bound is 1
        (0.94, 10_000.0, False),
        (0.39, 400.0, True),  # data-bound at 400/s of 1,000: the bound is 0.4
        (0.37, 400.0, False),
    ],
)
def test_the_busy_target_reads_the_choice_against_what_the_data_allows(
    busy: float, data_ceiling: float, passed: bool
) -> None:
    measurements = [
        _row("default", 300.0, 0.3, 1000.0),
        _row("chosen", 900.0, busy, 1000.0, seeds=(1,)),
    ]
    found = assess_device(measurements, [{"seed": 1}], data_ceiling)["simulated_device"]
    assert found["verdict"]["passed"] is passed
    chosen = found["choices"][0]
    assert chosen["busy_vs_bound"] == pytest.approx(busy / min(1.0, data_ceiling / 1000.0))
    assert found["verdict"]["detail"].endswith(
        f"the most: {chosen['busy_vs_bound']:.3f} x its bound (chosen, busy {busy:.3f} of "
        f"{chosen['busy_bound']:.3f})"
    )
    assert chosen["limit"] == min(1000.0, data_ceiling)
    assert chosen["vs_limit"] == pytest.approx(900.0 / min(1000.0, data_ceiling))


def test_the_busy_target_is_judged_only_where_a_device_was_read() -> None:
    plain = [{"describe": "default", "median": 1.0, "seeds": [1]}]
    assert assess_device(plain, [{"seed": 1}], 1000.0) == {}
    assert assess_device([_row("x", 1.0, 1.0, 1.0, (1,))], [{"seed": 1}], None) == {}
    assert busy_verdict([]).passed is False


def test_the_final_rounds_reading_judges_where_the_final_set_took_the_choice() -> None:
    row = _row("chosen", 900.0, 0.5, 1000.0, seeds=(1,))
    row.update(final_median=950.0, final_device_readings=[{"utilisation": 0.97, "ceiling": 1000.0}])
    found = assess_device([row], [{"seed": 1}], 10_000.0)["simulated_device"]
    assert found["verdict"]["passed"] and found["choices"][0]["samples_per_s"] == 950.0


def test_the_report_prints_every_configs_rate_busy_share_and_distance_to_the_limit() -> None:
    measurements = [_row("workers=2 batch=32", 500.0, 0.5, 1000.0, seeds=(1,))]
    section = assess_device(measurements, [{"seed": 1}], 800.0)
    text = "\n".join(device_lines(section))
    assert "| workers=2 batch=32 | 500 | 0.500 | 1,000 | 800 | 0.625 |" in text
    assert "FAIL choice keeps the device busy" in text  # 0.5 of a possible 0.8
    # What no config reached is named: here the only config, 0.625 of its bound.
    assert "of every config measured, the most: 0.625 x its bound (workers=2 batch=32" in text
    assert device_lines({}) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_no_probe_window_reads_the_device_faster_than_it_runs(tmp_path, mode: str) -> None:
    """The probe times a CPU device's windows with no synchronize at their edges: a window
    can count at most the queue's depth of kernels the device has not yet run
    (:mod:`benchmarks.simdevice._device`), so no window exceeds the ceiling by more."""
    from autotune.probe import ProbeRequest, WorkloadSource, run_probe

    spec = DeviceSpec(launch_s=0.01, sample_s=0.0, mode=mode)  # type: ignore[arg-type]
    config = _config(tmp_path, SIM_CONFIG.replace(repr(SPEC), repr(spec)))
    window = 0.3
    request = ProbeRequest(
        source=WorkloadSource(config_path=str(config)),
        settings=Settings(batch_size=8),
        device="cpu",
        window_seconds=window,
        max_windows=3,
        warmup_seconds=0.1,
        stall_timeout=120.0,
    )
    result = run_probe(request)
    assert result.ok, result.failure
    slack = 1 + spec.queue_depth * spec.step_seconds(8, amp=False) / window
    for found in result.figures.windows:
        assert found.samples / found.seconds <= spec.ceiling(8, amp=False) * slack


def test_a_simulated_workload_is_judged_on_the_devices_busy_share_end_to_end(
    monkeypatch, tmp_path
) -> None:
    """generalise on a sim workload, with the searches, the plain loop and the data
    ceiling faked: each measurement's reading reaches the section, and the busy target
    and its table are judged and written."""
    import itertools

    from test_generalise import MACHINE, result

    import autotune
    from benchmarks.common._workloads import find
    from benchmarks.generalise import _check as _generalise
    from benchmarks.generalise._check import GeneraliseOptions, run_workload
    from benchmarks.generalise._report import markdown

    chosen = Settings(batch_size=64, num_workers=2, prefetch_factor=2, threads=1)

    def search(config: Path, **options: Any) -> Any:
        return result(chosen, (900.0, 950.0, 1000.0))

    def measure(config: Path, settings: Settings, **options: Any) -> float:
        busy = 0.97 if settings.num_workers else 0.5
        options["readings"].append({"utilisation": busy, "ceiling": 1000.0})
        return 1000.0 * busy

    ticks = itertools.count()
    monkeypatch.setattr(autotune, "search", search)
    monkeypatch.setattr(_generalise_rounds, "measure", measure)
    monkeypatch.setattr(
        _generalise_rounds, "time", types.SimpleNamespace(perf_counter=ticks.__next__)
    )
    monkeypatch.setattr(_generalise, "data_ceiling", lambda config, batch: 5000.0)
    options = GeneraliseOptions(seeds=1, rounds=3, final_rounds=3, study_dir=tmp_path)
    section = run_workload(find(["sim-device-bound"])[0], options, MACHINE, lambda line: None)
    device = section["simulated_device"]
    assert device["data_ceiling"] == 5000.0
    assert device["verdict"]["passed"] and device["choices"][0]["utilisation"] == 0.97
    assert {c["limit"] for c in device["configs"]} == {1000.0}
    assert "| workers=2 prefetch=2 persistent=no batch=64 threads=1 | 970 | 0.970 |" in markdown(
        section
    )
