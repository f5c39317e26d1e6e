"""The copy to the device and the wait for data share the window honestly: a copy
queued without blocking (pinned memory, ``non_blocking``) runs on the device while the
host already waits for the next batch, and that part is the wait's, not the copy's
again, so the two shares never add up past the window.

The device is a stand-in on a fake clock: work and copies queue on its one stream, and
its events are stamped when it reaches them, as CUDA's are."""

from __future__ import annotations

import threading

import pytest
import torch

from autotune.probe import Figures, _measure
from autotune.probe._measure import SoloPace, Steps, measure
from autotune.probe._timing import EventCopyTimer, outside


class QueuedDevice:
    """One stream on a fake clock shared with the host: ``now`` is the host's time,
    ``free_at`` when the device has done what it was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        self.free_at = 0.0
        monkeypatch.setattr(_measure.time, "perf_counter", lambda: self.now)

    def queue(self, seconds: float) -> None:
        """Device work that returns to the host at once."""
        self.free_at = max(self.now, self.free_at) + seconds

    def drain(self) -> None:
        """The host waits for the device (a sync, or reading the loss)."""
        self.now = max(self.now, self.free_at)

    def event(self) -> QueuedEvent:
        return QueuedEvent(self)

    def timer(self) -> EventCopyTimer:
        return EventCopyTimer(self.event, stream=None, clock=lambda: self.now)


class QueuedEvent:
    def __init__(self, device: QueuedDevice) -> None:
        self.device = device
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        self.at = max(self.device.now, self.device.free_at)

    def elapsed_time(self, end: QueuedEvent) -> float:
        return (end.at - self.at) * 1000.0


def figures_of(
    device: QueuedDevice, *, load: float, copy: float, work: float, reads_loss: bool
) -> Figures:
    """Two windows of 0.3 s of a loop whose loader blocks the host ``load`` s a batch,
    whose pinned copy queues ``copy`` s on the device, and whose step queues ``work`` s
    after 1 ms of the host's time (then waits for the device when it ``reads_loss``)."""
    events: list[tuple[str, object]] = []

    def next_batch() -> tuple[torch.Tensor, int]:
        device.now += load
        return torch.zeros(1), 4

    def to_device(batch: object) -> object:
        device.queue(copy)
        return batch

    def step(batch: object) -> None:
        device.now += 0.001
        device.queue(work)
        if reads_loss:
            device.drain()

    measure(
        SoloPace(
            warmup_seconds=0.05, window_seconds=0.3, send=events.append, stop=threading.Event()
        ),
        Steps(next_batch=next_batch, copy=to_device, work=step, echo=1, timer=device.timer()),
        max_windows=2,
        device=torch.device("hpu"),
    )
    return Figures(windows=tuple(w for kind, w in events if kind == "window"))


@pytest.fixture
def device(monkeypatch) -> QueuedDevice:
    # The window edges synchronise the stand-in through torch.hpu.synchronize.
    stand_in = QueuedDevice(monkeypatch)
    monkeypatch.setattr(
        torch, "hpu", type("hpu", (), {"synchronize": staticmethod(stand_in.drain)}), raising=False
    )
    return stand_in


def test_a_pinned_copy_hidden_by_the_next_wait_is_not_counted_again(device) -> None:
    # Each step: the host waits 30 ms for the batch, queues its 20 ms copy and 5 ms of
    # work, and is back waiting 1 ms later: 19 ms of the copy run inside that wait.
    figures = figures_of(device, load=0.030, copy=0.020, work=0.005, reads_loss=False)
    for w in figures.windows:
        # The window's edge waits for the last copy and step: 24 ms after the last step.
        assert w.seconds == pytest.approx(0.031 * w.steps + 0.024)
        assert w.wait_seconds == pytest.approx(0.030 * w.steps)
        # 1 ms of each copy outside the waits, and all of the last one (no wait after it).
        assert w.copy_seconds == pytest.approx(0.001 * (w.steps - 1) + 0.020)
        assert w.device_seconds == pytest.approx(0.025 * w.steps)
    # Read on the device's clock alone, the copy would take 20 of every 31 ms, and the
    # two shares would add up to about 1.5 windows.
    assert figures.wait_fraction + figures.copy_fraction <= 1.0
    assert figures.copy_fraction < 0.15
    assert figures.device_busy_fraction == pytest.approx(0.75, abs=0.05)


def test_a_copy_the_host_waits_through_in_its_step_is_all_copying(device) -> None:
    # The step reads its loss: the host waits for the 20 ms copy and the 5 ms of work
    # inside the step, not in the loader (1 ms): the copy costs the step all its time.
    figures = figures_of(device, load=0.001, copy=0.020, work=0.005, reads_loss=True)
    for w in figures.windows:
        assert w.seconds == pytest.approx(0.026 * w.steps)
        assert w.wait_seconds == pytest.approx(0.001 * w.steps)
        assert w.copy_seconds == pytest.approx(0.020 * w.steps)
        assert w.device_seconds == pytest.approx(0.025 * w.steps)
    assert figures.device_busy_fraction == pytest.approx(25 / 26)


@pytest.mark.parametrize(
    ("spans", "waits", "expected"),
    [
        ([], [(0.0, 1.0)], 0.0),
        ([(0.0, 1.0)], [], 1.0),
        ([(0.0, 1.0)], [(0.5, 2.0)], 0.5),  # its end inside a wait
        ([(1.0, 3.0)], [(0.0, 1.5), (2.0, 2.5)], 1.0),  # two waits cut it
        ([(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5)], 1.0),  # one wait over two copies
        ([(1.0, 2.0)], [(0.0, 5.0)], 0.0),  # all hidden
        ([(1.0, 2.0)], [(2.0, 3.0)], 1.0),  # touching is not overlapping
    ],
)
def test_outside_counts_the_copies_time_outside_every_wait(spans, waits, expected) -> None:
    assert outside(spans, waits) == pytest.approx(expected)


def test_a_timer_never_begun_counts_every_copy_in_full(device) -> None:
    timer = device.timer()
    timer.copy(lambda batch: device.queue(0.02), "batch")
    assert timer.take([(0.0, 1.0)]).copy_seconds == pytest.approx(0.02)


def test_the_busy_span_runs_from_a_batchs_copy_to_the_end_of_its_steps(device) -> None:
    timer = device.timer()
    timer.begin()
    timer.copy(lambda batch: device.queue(0.02), "batch")
    device.queue(0.03)  # its step
    timer.stepped()
    timer.stepped()  # a second call for the same batch adds nothing
    device.now = 1.0  # idle, then the next batch
    timer.copy(lambda batch: device.queue(0.01), "batch")
    timer.stepped()
    device.drain()
    timed = timer.take()
    assert timed.copy_seconds == pytest.approx(0.03)
    assert timed.device_seconds == pytest.approx(0.06)
    assert timer.take().device_seconds is None  # nothing timed since
