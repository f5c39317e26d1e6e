"""The simulated accelerator's timing: busy time, the bounded queue, synchronous mode,
the AMP factor, overlap with loading, and no CPU held while a kernel runs.

The timeline is checked exactly on a clock the test moves (sleeping moves it); the
overlap and the CPU it holds are checked on the real clock, with margins wide enough
for a loaded 2-core machine.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch
from fake_clock import FakeTime
from torch import nn

from benchmarks.simdevice import (
    DeviceSpec,
    SimDevice,
    SimulatedModel,
    _process,
    current_device,
    process_device,
)


@pytest.fixture(autouse=True)
def no_device_yet(monkeypatch) -> None:
    """Each test starts in a process that has made no device."""
    monkeypatch.setattr(_process, "_device", None)
    monkeypatch.setattr(_process, "_owner", None)


def fake_device(spec: DeviceSpec) -> tuple[SimDevice, FakeTime]:
    clock = FakeTime()

    def sleep(seconds: float) -> None:
        clock.t += seconds

    return SimDevice(spec, clock=clock, sleep=sleep), clock


def test_a_step_costs_its_launch_plus_its_samples_and_amp_shortens_the_samples() -> None:
    spec = DeviceSpec(launch_s=0.002, sample_s=0.001, amp_factor=0.25)
    assert spec.step_seconds(10, amp=False) == pytest.approx(0.012)
    assert spec.step_seconds(10, amp=True) == pytest.approx(0.002 + 10 * 0.00025)
    assert spec.ceiling(10, amp=False) == pytest.approx(10 / 0.012)
    # Launch overhead: a larger batch raises the device's rate.
    assert spec.ceiling(100, amp=False) == pytest.approx(100 / 0.102)


@pytest.mark.parametrize(
    "fields",
    [
        {"launch_s": -1.0, "sample_s": 0.001},
        {"launch_s": 0.0, "sample_s": 0.0},
        {"launch_s": 0.001, "sample_s": 0.001, "amp_factor": 1.5},
        {"launch_s": 0.001, "sample_s": 0.001, "mode": "eager"},
        {"launch_s": 0.001, "sample_s": 0.001, "queue_depth": 0},
    ],
)
def test_a_spec_out_of_range_says_what_it_got(fields) -> None:
    with pytest.raises(ValueError, match="expected"):
        DeviceSpec(**fields)


def test_busy_time_is_what_was_launched_once_it_has_run() -> None:
    device, clock = fake_device(DeviceSpec(launch_s=0.001, sample_s=0.001, queue_depth=4))
    for _ in range(3):
        device.launch(9, amp=False)  # 10 ms each
    assert clock.t == 0.0  # async: the launches returned at once
    assert device.busy_seconds() == 0.0
    clock.t = 0.015
    assert device.busy_seconds() == pytest.approx(0.015)  # one and a half kernels run
    device.synchronize()
    assert clock.t == pytest.approx(0.030)
    assert device.busy_seconds() == pytest.approx(device.launched_seconds) == pytest.approx(0.03)
    clock.t = 1.0  # idle time is not busy time
    device.launch(9, amp=False)
    device.synchronize()
    assert device.busy_seconds() == pytest.approx(0.04)
    assert (device.kernels, device.samples) == (4, 36)


def test_the_samples_ahead_are_those_launched_and_not_yet_trained() -> None:
    device, clock = fake_device(DeviceSpec(launch_s=0.0, sample_s=0.001, queue_depth=3))
    for _ in range(3):
        device.launch(10, amp=False)  # 10 ms each
    assert device.samples_ahead() == pytest.approx(30)
    clock.t = 0.015  # the first trained, the second half-way
    assert device.samples_ahead() == pytest.approx(15)
    device.synchronize()
    assert device.samples_ahead() == 0


def test_a_launch_into_a_full_queue_waits_for_the_oldest_kernel() -> None:
    device, clock = fake_device(DeviceSpec(launch_s=0.01, sample_s=0.0, queue_depth=2))
    device.launch(1, amp=False)
    device.launch(1, amp=False)
    assert clock.t == 0.0
    device.launch(1, amp=False)  # the queue holds two: waits for the first to end
    assert clock.t == pytest.approx(0.01)
    device.launch(1, amp=False)
    assert clock.t == pytest.approx(0.02)
    # However long the host took, it is never more than the queue's depth ahead.
    assert device.launched_seconds - device.busy_seconds() <= 2 * 0.01 + 1e-12


def test_sync_mode_waits_for_every_kernel_it_launches() -> None:
    device, clock = fake_device(DeviceSpec(launch_s=0.002, sample_s=0.001, mode="sync"))
    device.launch(8, amp=False)
    assert clock.t == pytest.approx(0.010)
    device.launch(8, amp=True)  # amp_factor 1: as long
    assert clock.t == pytest.approx(0.020)
    assert device.busy_seconds() == pytest.approx(0.020)


def test_a_kernel_holds_no_cpu_while_it_runs() -> None:
    device = SimDevice(DeviceSpec(launch_s=0.3, sample_s=0.0, mode="sync"))
    wall, cpu = time.perf_counter(), time.process_time()
    device.launch(1, amp=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= 0.3
    assert cpu < 0.1  # a busy wait would take ~0.3 s of CPU


def _load(seconds: float) -> None:
    """Stands in for a batch loaded in the training process (num_workers=0)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _loop(mode: str) -> float:
    device = SimDevice(DeviceSpec(launch_s=0.04, sample_s=0.0, mode=mode))  # type: ignore[arg-type]
    began = time.perf_counter()
    for _ in range(8):
        _load(0.04)
        device.launch(1, amp=False)
    device.synchronize()
    assert device.busy_seconds() == pytest.approx(8 * 0.04)
    return time.perf_counter() - began


def test_async_launches_overlap_loading_and_sync_ones_do_not() -> None:
    # 8 steps of 40 ms loading and 40 ms of device time: 0.64 s one after the other,
    # 0.36 s overlapped. A loaded machine stretches the loading, never shortens it.
    assert _loop("sync") >= 0.64
    asynchronous = _loop("async")
    assert asynchronous < 0.9 * _loop("sync")
    assert asynchronous >= 0.36


def test_the_amp_factor_shortens_a_model_step_under_autocast() -> None:
    spec = DeviceSpec(launch_s=0.0, sample_s=0.001, amp_factor=0.25, mode="sync")
    model = SimulatedModel(nn.Linear(4, 2), spec)
    device = process_device(spec)
    inputs = torch.randn(40, 4)
    before = device.launched_seconds
    model(inputs).sum().backward()
    full = device.launched_seconds - before
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model(inputs)
    assert output.dtype == torch.float32  # the host's tiny network runs outside autocast
    output.sum().backward()
    assert full == pytest.approx(0.040)
    assert device.launched_seconds - before - full == pytest.approx(0.010)


def _child_device(queue) -> None:
    found = current_device()
    made = process_device(DeviceSpec(launch_s=0.001, sample_s=0.0))
    queue.put((found is None, made.kernels))


def test_a_forked_process_gets_a_device_of_its_own() -> None:
    spec = DeviceSpec(launch_s=0.001, sample_s=0.0)
    process_device(spec).launch(1, amp=False)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_device, args=(queue,))
    child.start()
    fresh, kernels = queue.get(timeout=30)
    child.join(timeout=30)
    assert fresh and kernels == 0
    assert current_device() is not None and current_device().kernels >= 1


def test_a_model_of_another_spec_gets_a_new_device_and_the_same_spec_the_same() -> None:
    first = process_device(DeviceSpec(launch_s=0.001, sample_s=0.0))
    assert process_device(DeviceSpec(launch_s=0.001, sample_s=0.0)) is first
    second = process_device(DeviceSpec(launch_s=0.002, sample_s=0.0))
    assert second is not first and current_device() is second
