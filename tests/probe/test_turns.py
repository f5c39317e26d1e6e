"""Configs measured in turns in one probe process: each its own windows, start-up and
failure; the workers of the config before a turn idle first."""

from __future__ import annotations

import math
import signal
import threading
import time
import weakref
from typing import Any, cast

import pytest
import torch
import workloads
from faults import probe_request as request

from autotune.probe import run_probe
from autotune.probe._measure import Steps
from autotune.probe._timing import copy_timer
from autotune.probe._turns import REWARM_SECONDS, Paused, Turn, TurnSetup, _fail, measure_turns
from autotune.settings import Settings

NO_WORKERS = Settings(batch_size=4)
FOUR_WORKERS = Settings(batch_size=4, num_workers=4, prefetch_factor=2, persistent_workers=True)


def test_each_config_gets_its_windows_and_start_and_the_faster_loader_reads_faster() -> None:
    # 20 ms of sleep per item: four workers load about 4x what none do, whatever the CPUs.
    turns = (NO_WORKERS, FOUR_WORKERS)
    result = run_probe(request(workloads.SleepyDataset(delay=0.02), settings=turns[0], turns=turns))
    assert result.ok, result.failure
    alone, four = result.turns
    assert alone.ok and four.ok
    assert len(alone.figures.windows) == len(four.figures.windows) == 3
    assert alone.figures.startup_s is not None and four.figures.startup_s is not None
    # Each its own figures: samples of batch 4, rates near what each loader delivers.
    assert all(w.samples % 4 == 0 for w in (*alone.figures.windows, *four.figures.windows))
    assert alone.figures.samples_per_s < 55
    assert four.figures.samples_per_s > 2 * alone.figures.samples_per_s
    # The whole probe holds every window, and the memory of all the loaders together.
    assert len(result.figures.windows) == 6
    assert result.figures.peak_memory_bytes and alone.figures.peak_memory_bytes is None


def test_a_config_that_fails_alone_leaves_the_others_measured() -> None:
    # Records that raise only in a worker: the loader with workers fails, the other goes on.
    turns = (FOUR_WORKERS, NO_WORKERS)
    result = run_probe(
        request(workloads.CorruptInWorkersDataset(delay=0.0), settings=turns[0], turns=turns)
    )
    assert result.ok, result.failure
    broken, fine = result.turns
    assert broken.failure is not None and "corrupt record" in broken.failure.message
    assert fine.ok and len(fine.figures.windows) == 3


def test_a_crash_in_one_configs_turn_is_its_own_and_the_others_share_it() -> None:
    # The process crashes (SIGSEGV) after 8 items, in the first config's first turn: its
    # own failure; the second config, cut short, shares the process's.
    turns = (NO_WORKERS, Settings(batch_size=4, threads=1))
    result = run_probe(request(workloads.SegfaultDataset(after=8), settings=turns[0], turns=turns))
    assert result.failure is not None and result.failure.kind == "crash"
    crashed, cut = result.turns
    assert crashed.failure == result.failure and crashed.failure is not result.failure
    assert cut.failure is result.failure


def test_compute_turns_measure_each_combination_on_held_batches() -> None:
    combos = (Settings(batch_size=4, threads=1), Settings(batch_size=16, threads=1))
    result = run_probe(
        request(
            workloads.instant_dataset(),
            model=workloads.steady_model,
            settings=combos[0],
            turns=combos,
            mode="compute",
            max_windows=2,
        )
    )
    assert result.ok, result.failure
    small, large = result.turns
    # Each turn trains on batches of its own combination.
    assert all(w.samples == 4 * w.steps for w in small.figures.windows)
    assert all(w.samples == 16 * w.steps for w in large.figures.windows)
    # Every forward takes 30 ms whatever the batch: batch 16 trains about 4x as fast as 4.
    # The band is wide, as a window holds only a few steps and a loaded machine delays a
    # wake-up from sleep; one figure for both turns would read 1x, swapped ones 0.25x.
    assert 2 < large.figures.samples_per_s / small.figures.samples_per_s < 6
    assert all(part.figures.wait_fraction < 0.05 for part in result.turns)


def test_a_configs_workers_are_stopped_between_its_turns_and_go_on_at_the_next() -> None:
    sent: list[tuple[int, int]] = []
    live = [11, 12]  # the first config's workers
    paused = Paused(children=lambda: list(live), signal_pid=lambda pid, n: sent.append((pid, n)))
    paused.resume(0)  # its first turn: nothing stopped yet
    paused.pause(0)
    assert sent == [(11, signal.SIGSTOP), (12, signal.SIGSTOP)]
    live += [21]  # the second config's worker started in its turn
    paused.resume(1)
    paused.pause(1)
    assert sent[2:] == [(21, signal.SIGSTOP)]  # the first config's were stopped already
    paused.resume(0)
    assert sent[3:] == [(11, signal.SIGCONT), (12, signal.SIGCONT)]
    paused.resume_all()
    assert sent[5:] == [(21, signal.SIGCONT)] and not paused.held


def test_a_loader_that_waits_does_not_load_ahead_for_free_between_its_turns() -> None:
    # 20 ms of sleep per item: 4 workers deliver about 200 samples/s of batch 4, sleeping,
    # whatever the CPUs. A queue of 32 batches refilled while the slow loader's turns run
    # would read several times that; stopped between its turns, it reads its own pace.
    deep = Settings(batch_size=4, num_workers=4, prefetch_factor=8, persistent_workers=True)
    turns = (NO_WORKERS, deep)
    result = run_probe(request(workloads.SleepyDataset(delay=0.02), settings=turns[0], turns=turns))
    assert result.ok, result.failure
    _alone, four = result.turns
    assert 100 < four.figures.samples_per_s < 240


class _Iterator:
    """Stands in for a loader's iterator, whose end shuts its workers down."""


def _next_batch(iterator: _Iterator) -> None:
    raise ValueError("corrupt record 4")  # its frame holds the iterator, as DataLoader's


def test_a_failed_turn_lets_go_of_its_loader_while_its_error_is_handled() -> None:
    # The traceback of the error a turn met holds the loader's iterator; unless the turn's
    # failure clears it, the iterator (and its workers) outlive the turn until the garbage
    # collector finds them, during another config's turn, with those workers stopped.
    class Holder:
        def __init__(self) -> None:
            self.iterator: _Iterator | None = _Iterator()

    holder = Holder()
    ended = weakref.ref(cast(_Iterator, holder.iterator))
    sent: list[Any] = []

    def close() -> None:
        holder.iterator = None

    turn = Turn(
        index=0,
        settings=Settings(batch_size=4),
        steps=cast(Any, None),
        queued=0,
        turn=1,
        close=close,
    )
    try:
        _next_batch(cast(_Iterator, holder.iterator))
    except ValueError as error:
        _fail(turn, error, sent.append, torch.device("cpu"))
        assert ended() is None  # gone while the error is still being handled
    assert turn.failed
    ((event, (index, failure)),) = sent
    assert (event, index) == ("turn_error", 0)
    assert (failure.kind, failure.message) == ("error", "ValueError: corrupt record 4")


STEP_S = 1 / 128
"""A training step of the fake clock: a power of two, so that its sums are exact."""


@pytest.mark.parametrize(("warmup_s", "rewarm_steps"), [(3 * STEP_S, 3), (0.5, 13)])
def test_a_later_turn_warms_up_again_no_longer_than_the_first_did(
    monkeypatch, warmup_s, rewarm_steps
) -> None:
    # A clock that only training steps move: the steps each turn trains count its
    # warm-up and its window, whatever the machine's load.
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    trained: list[int] = []

    def work(batch: Any) -> None:
        now[0] += STEP_S
        trained[-1] += 1

    def send(event: tuple[str, Any]) -> None:
        if event[0] == "turn_start":
            trained.append(0)

    turns = [
        Turn(
            index=index,
            settings=Settings(batch_size=1),
            steps=Steps(lambda: (0, 1), lambda b: b, work, 1, copy_timer(torch.device("cpu"))),
            queued=0,
            turn=1,
        )
        for index in range(2)
    ]
    setup = TurnSetup(
        window_seconds=2 * STEP_S,
        warmup_seconds=warmup_s,
        trainer=None,
        default_threads=1,
        device=torch.device("cpu"),
        send=send,
        stop=threading.Event(),
    )
    measure_turns(turns, setup, passes=2, paused=cast(Paused, _NoPause()))
    first = math.ceil(warmup_s / STEP_S)  # the first turns: the whole warm-up, a window
    # the later ones: REWARM_SECONDS, or the warm-up where that is shorter, then a window
    assert rewarm_steps == math.ceil(min(REWARM_SECONDS, warmup_s) / STEP_S)
    assert trained == [first + 2, first + 2, rewarm_steps + 2, rewarm_steps + 2]


class _NoPause:
    def pause(self, index: int) -> None: ...

    def resume(self, index: int) -> None: ...

    def resume_all(self) -> None: ...
