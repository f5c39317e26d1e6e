"""A probe whose steps are slow but steady is not a hang: the warm-up (up to
``num_workers x prefetch_factor`` steps) and each window tell the search it is alive
after every step, so the stall timeout kills only a step or batch that never ends."""

from __future__ import annotations

import threading

import probe_pieces
import pytest
import torch
import workloads
from faults import probe_request

from autotune.probe import _measure, run_probe
from autotune.probe._measure import Heartbeat, SoloPace, Steps, measure
from autotune.probe._timing import copy_timer
from autotune.settings._settings import Settings


class Clock:
    """``time.monotonic`` for the heartbeat, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_heartbeat_sends_at_most_once_per_interval() -> None:
    sent: list[tuple[str, object]] = []
    clock = Clock()
    beat = Heartbeat(sent.append, every=1.0, clock=clock)
    for now in (0.2, 0.5, 1.1, 1.2, 2.0, 2.15, 3.5):
        clock.now = now
        beat()
    assert [kind for kind, _ in sent] == ["alive"] * 3  # at 1.1, 2.15 and 3.5
    assert Heartbeat(sent.append, every=1.0, clock=clock).every == 1.0


def test_a_heartbeat_needs_a_positive_interval() -> None:
    with pytest.raises(ValueError, match="every is 0"):
        Heartbeat(lambda event: None, every=0.0)


def test_the_loop_beats_after_every_step_of_the_warm_up_and_the_windows(monkeypatch) -> None:
    # A fake clock that each step moves 1 s: a warm-up of 8 queued batches sends nothing
    # else for 9 s, longer than a stall timeout of a few seconds.
    now = [0.0]
    monkeypatch.setattr(_measure.time, "perf_counter", lambda: now[0])
    events: list[tuple[str, object]] = []
    beats: list[float] = []

    def work(batch: object) -> None:
        now[0] += 1.0

    pace = SoloPace(
        warmup_seconds=0.5,
        window_seconds=2.0,
        send=events.append,
        stop=threading.Event(),
        queued=8,
    )
    steps = Steps(
        next_batch=lambda: (torch.zeros(1), 1),
        copy=lambda batch: batch,
        work=work,
        echo=1,
        timer=copy_timer(torch.device("cpu")),
        beat=lambda: beats.append(now[0]),
    )
    measure(pace, steps, max_windows=1, device=torch.device("cpu"))
    # 9 warm-up steps and 2 measured ones, each followed by a beat.
    assert beats == [float(step) for step in range(1, 12)]
    assert [kind for kind, _ in events] == ["ready", "window"]


def test_a_warm_up_longer_than_the_stall_timeout_is_not_killed_as_a_hang() -> None:
    # 2 workers x prefetch 4: 8 queued batches to train through at 0.4 s a step, 3.6 s of
    # warm-up, more than twice the stall timeout.
    settings = Settings(batch_size=4, num_workers=2, prefetch_factor=4)
    request = probe_request(
        workloads.SleepyDataset(length=64),
        probe_pieces.slow_step_model,
        settings=settings,
        stall_timeout=1.5,
        max_windows=1,
    )
    result = run_probe(request)
    assert result.ok, result.failure
    assert len(result.figures.windows) == 1


def test_a_step_that_never_ends_is_still_killed_at_the_stall_timeout() -> None:
    request = probe_request(workloads.HangingDataset(after=12), stall_timeout=1.5)
    result = run_probe(request)
    assert result.failure is not None and result.failure.kind == "timeout"
    assert "after start-up" in result.failure.message
