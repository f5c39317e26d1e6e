"""Timing on a device, with stand-ins for the device boundary: the synchronize of any
accelerator module, the copy timed apart from the wait, the batch's samples counted
from its sampler."""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
import types

import pytest
import torch
import workloads
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from autotune.probe import Figures, ProbeRequest, Window, WorkloadSource, run_probe
from autotune.probe._build import BatchStream, sampler_counts
from autotune.probe._measure import SoloPace, Steps, measure
from autotune.probe._timing import (
    EventCopyTimer,
    HostCopyTimer,
    SyncedCopyTimer,
    copy_timer,
    synchronize,
)
from autotune.probe._train import batch_length
from autotune.settings import Settings
from autotune.workload import Workload


class FakeAccelerator(types.SimpleNamespace):
    """A ``torch.<device type>`` module stand-in that counts its synchronize calls."""

    def __init__(self) -> None:
        super().__init__(calls=[])

    def synchronize(self, *args: object) -> None:
        self.calls.append(args)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("mps", [()]),  # torch.mps.synchronize() takes no device
        ("xpu", [(torch.device("xpu", 1),)]),
        ("hpu", [()]),  # any accelerator module torch exposes with a synchronize
    ],
)
def test_synchronize_calls_the_device_modules_own(monkeypatch, kind, expected) -> None:
    fake = FakeAccelerator()
    monkeypatch.setattr(torch, kind, fake, raising=False)
    device = torch.device(kind, 1) if kind == "xpu" else torch.device(kind)
    synchronize(device)
    assert fake.calls == expected


def test_synchronize_passes_the_cuda_device(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append(args))
    synchronize(torch.device("cuda", 0))
    assert calls == [(torch.device("cuda", 0),)]


def test_synchronize_does_nothing_on_the_cpu_or_without_a_module(monkeypatch) -> None:
    synchronize(torch.device("cpu"))
    # A device type whose module has no synchronize (or no module at all) is left alone.
    monkeypatch.setattr(torch, "hpu", types.SimpleNamespace(), raising=False)
    synchronize(torch.device("hpu"))
    monkeypatch.delattr(torch, "hpu", raising=False)
    synchronize(torch.device("hpu"))


# --------------------------------------------------------------------- the record
def test_windows_written_before_the_copy_was_measured_still_load() -> None:
    old = {"index": 0, "seconds": 2.0, "samples": 64, "fresh": 64, "steps": 2}
    figures = Figures.from_dict({"windows": [{**old, "wait_seconds": 0.5}]})
    assert figures.windows[0].copy_seconds == 0.0
    assert figures.copy_fraction == 0.0
    assert figures.wait_fraction == pytest.approx(0.25)


def test_the_copy_share_is_recorded_beside_the_wait_share() -> None:
    window = Window(
        index=0, seconds=2.0, samples=64, fresh=64, steps=2, wait_seconds=0.5, copy_seconds=0.2
    )
    data = Figures(windows=(window,)).to_dict()
    assert data["copy_fraction"] == pytest.approx(0.1)
    assert data["wait_fraction"] == pytest.approx(0.25)
    assert Figures.from_dict(data).windows == (window,)


# --------------------------------------------------------------------- the loop's split
WINDOWS = 2


def measured(device: torch.device, *, next_batch, copy, work, timer=None) -> Figures:
    """The figures of :func:`measure` driven directly: 2 windows of 0.3 s."""
    events: list[tuple[str, object]] = []
    pace = SoloPace(
        warmup_seconds=0.05, window_seconds=0.3, send=events.append, stop=threading.Event()
    )
    steps = Steps(
        next_batch=next_batch,
        copy=copy,
        work=work,
        echo=1,
        timer=timer or copy_timer(device),
    )
    measure(pace, steps, max_windows=WINDOWS, device=device)
    windows = tuple(payload for kind, payload in events if kind == "window")
    assert len(windows) == WINDOWS
    return Figures(windows=windows)


def sleeping(seconds: float):
    def sleep(batch: object) -> object:
        time.sleep(seconds)
        return batch

    return sleep


def loading(seconds: float):
    """A loader blocking ``seconds`` a batch, of 4 samples (a (2, 4) tensor: the count
    comes with the batch, not from its tensors)."""

    def load() -> tuple[torch.Tensor, int]:
        time.sleep(seconds)
        return torch.zeros(2, 4), 4

    return load


def test_the_wait_and_the_copy_are_timed_apart() -> None:
    # 20 ms blocked on the loader, 10 ms copying, 30 ms training: shares 1/3 and 1/6.
    figures = measured(
        torch.device("cpu"), next_batch=loading(0.02), copy=sleeping(0.01), work=sleeping(0.03)
    )
    # Relative checks: on a busy machine every sleep oversleeps by about the same.
    assert 0.2 < figures.wait_fraction < 0.45
    assert 0.08 < figures.copy_fraction < 0.28
    assert 1.3 < figures.wait_fraction / figures.copy_fraction < 3.0
    assert figures.wait_fraction + figures.copy_fraction < 0.7  # the rest is training
    assert all(w.samples == 4 * w.steps for w in figures.windows)


class StandInDevice(types.SimpleNamespace):
    """An accelerator on a timeline of its own, as a GPU runs: training steps are queued
    and return at once; a copy from pageable memory holds the host until the queued
    steps are done, then copies. Its events are stamped when the device reaches them."""

    def __init__(self) -> None:
        super().__init__(free_at=0.0, syncs=0)

    def launch(self, seconds: float) -> None:
        self.free_at = max(time.perf_counter(), self.free_at) + seconds

    def drain(self) -> None:
        delay = self.free_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def synchronize(self, *args: object) -> None:
        self.syncs += 1
        self.drain()

    def pageable_copy(self, seconds: float) -> None:
        self.drain()
        time.sleep(seconds)
        self.free_at = time.perf_counter()

    def event(self) -> StandInEvent:
        return StandInEvent(self)


class StandInEvent:
    def __init__(self, device: StandInDevice) -> None:
        self.device = device
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        self.at = max(time.perf_counter(), self.device.free_at)

    def elapsed_time(self, end: StandInEvent) -> float:
        return (end.at - self.at) * 1000.0


@pytest.mark.parametrize("clock", ["events", "synchronize"])
def test_a_slow_copy_and_a_slow_device_are_split_right(monkeypatch, clock) -> None:
    # Each step: 20 ms blocked on the loader while the device runs the last step's 30 ms;
    # the copy then holds the host 10 ms more until the device is free, and copies for
    # 10 ms. 40 ms a step: waiting 50%, copying 25%. Timing the host around loader and
    # copy together, as the loop once did, would call it all (100%) waiting for data.
    device = StandInDevice()
    monkeypatch.setattr(torch, "hpu", device, raising=False)
    timer = EventCopyTimer(device.event, stream=None) if clock == "events" else None

    def copy(batch: object) -> object:
        device.pageable_copy(0.01)
        return batch

    figures = measured(
        torch.device("hpu"),
        next_batch=loading(0.02),
        copy=copy,
        work=lambda batch: device.launch(0.03),
        timer=timer,
    )
    assert 0.35 < figures.wait_fraction < 0.65
    assert 0.15 < figures.copy_fraction < 0.35
    assert 1.4 < figures.wait_fraction / figures.copy_fraction < 3.0
    steps = sum(w.steps for w in figures.windows)
    if clock == "events":
        # The device is synchronised at the warm-up's end and at each window's end only.
        assert device.syncs == 1 + WINDOWS
    else:
        assert device.syncs >= 1 + WINDOWS + 2 * steps


def test_the_copy_timer_follows_the_device(monkeypatch) -> None:
    made = []
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing: made.append(enable_timing))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: f"stream of {device}")
    cuda = copy_timer(torch.device("cuda", 1))
    assert isinstance(cuda, EventCopyTimer) and cuda.stream == "stream of cuda:1"
    cuda.new_event()
    assert made == [True]  # events that can time
    monkeypatch.setattr(torch, "mps", FakeAccelerator())
    assert isinstance(copy_timer(torch.device("mps")), SyncedCopyTimer)
    assert type(copy_timer(torch.device("cpu"))) is HostCopyTimer


class RecordedEvent:
    """A CUDA event stand-in: where it was recorded, and a fixed time to the next."""

    def __init__(self) -> None:
        self.streams: list[object] = []

    def record(self, stream: object = None) -> None:
        self.streams.append(stream)

    def elapsed_time(self, end: RecordedEvent) -> float:
        return 1500.0  # milliseconds


def test_events_are_recorded_on_the_devices_stream_and_read_in_seconds() -> None:
    events: list[RecordedEvent] = []

    def new_event() -> RecordedEvent:
        events.append(RecordedEvent())
        return events[-1]

    timer = EventCopyTimer(new_event, stream="the stream")
    seen = []
    assert timer.copy(lambda batch: seen.append(batch) or "moved", "batch") == "moved"
    assert seen == ["batch"]
    assert [e.streams for e in events] == [["the stream"], ["the stream"]]
    assert timer.take().copy_seconds == 1.5


@pytest.mark.parametrize("timer", [HostCopyTimer(), SyncedCopyTimer(torch.device("cpu"))])
def test_the_host_timers_copy_the_batch_they_are_given(timer: HostCopyTimer) -> None:
    seen = []
    assert timer.copy(lambda batch: seen.append(batch) or "moved", "batch") == "moved"
    assert seen == ["batch"]


def test_a_device_module_whose_synchronize_is_not_callable_is_not_synced(monkeypatch) -> None:
    monkeypatch.setattr(torch, "hpu", types.SimpleNamespace(synchronize="a flag"), raising=False)
    synchronize(torch.device("hpu"))  # no TypeError: nothing to call
    assert type(copy_timer(torch.device("hpu"))) is HostCopyTimer


def test_event_times_are_read_once_and_in_seconds() -> None:
    device = StandInDevice()
    timer = EventCopyTimer(device.event, stream=None)
    assert timer.copy(sleeping(0.01), "batch") == "batch"
    assert 0.009 < timer.take().copy_seconds < 0.5
    assert timer.take().copy_seconds == 0.0


# --------------------------------------------------------------------- counting samples
def test_a_batch_whose_first_tensor_is_not_batch_major_is_guessed_by_its_shared_dimension() -> None:
    # (sequence 128, batch 4) first, then the targets (batch 4): 4 samples, not 128.
    assert batch_length((torch.zeros(128, 4, 16), torch.zeros(4, dtype=torch.long))) == 4
    assert batch_length({"ids": torch.zeros(8, 128), "mask": torch.zeros(8, 128)}) == 8
    assert batch_length([torch.zeros(32, 3, 64, 64), torch.zeros(32)]) == 32
    assert batch_length([torch.zeros(5, 7), torch.zeros(3)]) == 5  # nothing shared: leading
    assert batch_length(torch.tensor(1.0)) == 1
    assert batch_length({"name": "x"}) is None


def counted(stream: BatchStream, batches: int) -> list[int]:
    return [stream.next()[1] for _ in range(batches)]


@pytest.mark.parametrize(("drop_last", "expected"), [(False, [4, 4, 2] * 2), (True, [4, 4] * 3)])
def test_samples_are_counted_from_the_sampler_across_epochs(drop_last, expected) -> None:
    # Each batch is one (features, batch) tensor: its leading dimension is always 8.
    loader = DataLoader(
        workloads.SleepyDataset(length=10),
        batch_size=4,
        shuffle=True,
        drop_last=drop_last,
        collate_fn=workloads.sequence_first,
    )
    stream = BatchStream(loader, "loading", counts=sampler_counts(loader), default_n=99)
    assert counted(stream, len(expected)) == expected
    stream.close()  # an epoch cut short: the next one counts from its start
    assert counted(stream, 2) == [4, 4]


def test_a_distributed_sampler_counts_this_ranks_share() -> None:
    dataset = workloads.SleepyDataset(length=10)
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    stream = BatchStream(loader, "loading", counts=sampler_counts(loader))
    assert counted(stream, 4) == [4, 1, 4, 1]


def test_an_iterable_dataset_has_no_sampler_to_count_and_is_guessed() -> None:
    loader = DataLoader(workloads.SleepyStream(length=6), batch_size=4)
    assert sampler_counts(loader) is None
    stream = BatchStream(loader, "loading", counts=None, default_n=99)
    assert counted(stream, 3) == [4, 2, 4]


def test_a_probe_counts_the_samples_of_batches_that_are_not_batch_major() -> None:
    workload = Workload(
        dataset=workloads.SleepyDataset(length=64),
        model=workloads.SequenceFirstModel,
        collate_fn=workloads.sequence_first,
        batch_size=4,
    )
    request = ProbeRequest(
        source=WorkloadSource(pickled=pickle.dumps(workload)),
        settings=Settings(batch_size=4),
        device="cpu",
        window_seconds=0.1,
        max_windows=2,
        warmup_seconds=0.05,
        stall_timeout=20.0,
    )
    result = run_probe(request)
    assert result.ok, result.failure
    # Guessed from the tensor, each batch would count 8 (FEATURES), not its 4 samples.
    assert all(w.samples == 4 * w.steps for w in result.figures.windows)
    check = run_probe(dataclasses.replace(request, mode="check"))
    assert check.ok, check.failure
    assert check.info["batch_samples"] == 4
