"""The probe's measuring loop against loaders whose workers burst: the warm-up trains
through the batches queued while the workers started, and a window ends on a whole turn
of the workers. Time is a fake clock the loader and the training step move."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from autotune.probe import _measure
from autotune.probe._measure import SoloPace, Steps, Tally, Warmth, measure
from autotune.probe._timing import copy_timer

SAMPLES = 4
"""Samples in every batch."""


class FakeClock:
    """``time.perf_counter`` for the measuring loop: the loader and the step move it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        monkeypatch.setattr(_measure.time, "perf_counter", lambda: self.now)

    def train(self, batch: object) -> None:
        """A step that trains for 0.1 s."""
        self.now += 0.1

    def windows(
        self, batches: Iterator[torch.Tensor], *, windows: int, **pace: float | None
    ) -> list[float]:
        """samples/s of each of ``windows`` windows of :func:`measure` over ``batches``."""
        events: list[tuple[str, object]] = []
        solo = SoloPace(send=events.append, stop=threading.Event(), **pace)  # type: ignore[arg-type]
        steps = Steps(
            next_batch=lambda: (next(batches), SAMPLES),
            copy=lambda batch: batch,
            work=self.train,
            echo=1,
            timer=copy_timer(torch.device("cpu")),
        )
        measure(solo, steps, max_windows=windows, device=torch.device("cpu"))
        return [w.samples_per_s for kind, w in events if kind == "window"]  # type: ignore[attr-defined]


def test_the_warm_up_trains_through_the_batches_queued_while_the_workers_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)

    def loader() -> Iterator[torch.Tensor]:
        # 8 batches ready at once after the first (the workers' start-up), then 1 a second.
        for _ in range(1 + 8):
            yield torch.zeros(SAMPLES, 1)
        while True:
            clock.now += 1.0
            yield torch.zeros(SAMPLES, 1)

    # The loader makes 1 batch a second and the step takes 0.1 s: 4 / 1.1 samples/s.
    fooled = clock.windows(loader(), windows=1, warmup_seconds=0.5, window_seconds=0.35)
    assert fooled == [pytest.approx(SAMPLES * 4 / 0.4)]  # the backlog, trained in the window
    clock.now = 0.0
    read = clock.windows(loader(), windows=2, warmup_seconds=0.5, window_seconds=0.35, queued=8)
    assert read == [pytest.approx(SAMPLES / 1.1)] * 2


def test_a_window_ends_on_a_whole_turn_of_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)

    def loader() -> Iterator[torch.Tensor]:
        # 4 workers sharing the CPUs finish together: 4 batches at every whole second.
        turn = 0
        while True:
            turn += 1
            clock.now = max(clock.now, float(turn))
            for _ in range(4):
                yield torch.zeros(SAMPLES, 1)

    # The loader's rate is 4 batches a second: 16 samples/s.
    bursts = clock.windows(loader(), windows=3, warmup_seconds=0.0, window_seconds=0.25)
    assert max(bursts) > 1.2 * 16 or min(bursts) < 16 / 1.2  # one burst too many or too few
    clock.now = 0.0
    turns = clock.windows(loader(), windows=3, warmup_seconds=0.0, window_seconds=0.25, turn=4)
    assert turns == [pytest.approx(16.0)] * 3


def test_the_pace_asks_for_both_the_seconds_and_the_batches() -> None:
    pace = SoloPace(
        warmup_seconds=0.5,
        window_seconds=0.5,
        send=lambda event: None,
        stop=threading.Event(),
        queued=6,
        turn=3,
    )
    long_ago = _measure.time.perf_counter() - 10.0
    assert pace.warmed(6, long_ago) is Warmth.COLD
    assert pace.warmed(7, long_ago) is Warmth.WARM
    assert pace.warmed(7, _measure.time.perf_counter() + 1.0) is Warmth.COLD
    tally = Tally(began=0.0)
    for count in range(1, 7):
        tally.add(SAMPLES, 1, 0.0)
        assert pace.window_full(tally, 0.6) is (count % 3 == 0)
        assert pace.window_full(tally, 0.4) is False
    with pytest.raises(ValueError, match="turn is 0"):
        SoloPace(warmup_seconds=0, window_seconds=0, send=print, stop=threading.Event(), turn=0)


def test_windows_that_agree_end_the_loop_and_others_run_to_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(monkeypatch)

    def even() -> Iterator[torch.Tensor]:
        while True:
            yield torch.zeros(SAMPLES, 1)

    def slowing() -> Iterator[torch.Tensor]:
        # Each batch takes 10 ms longer than the one before: every window reads slower.
        delay = 0.0
        while True:
            delay += 0.01
            clock.now += delay
            yield torch.zeros(SAMPLES, 1)

    read = clock.windows(even(), windows=9, warmup_seconds=0.0, window_seconds=0.35, steady=0.01)
    assert read == [pytest.approx(SAMPLES / 0.1)] * 3
    clock.now = 0.0
    assert len(clock.windows(even(), windows=9, warmup_seconds=0.0, window_seconds=0.35)) == 9
    clock.now = 0.0
    moving = clock.windows(
        slowing(), windows=9, warmup_seconds=0.0, window_seconds=0.35, steady=0.01
    )
    assert len(moving) == 9 and moving[0] > moving[-1]
