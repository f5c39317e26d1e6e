"""The tuner on a fake clock: when it settles, on what, and when it climbs again.

The configs' step times are made up, so every decision is known in advance; no
DataLoader is built.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from fake_clock import FakeTime

import autotune
from autotune import Settings
from autotune.inloop._budget import Budget
from autotune.inloop._climb import ClimbOptions, without_persistence
from autotune.inloop._tuner import Tuner, TunerOptions
from autotune.study import locate

LOG = logging.getLogger("autotune.inloop.test")
STARTUP = 0.5
"""Seconds a config with workers takes to hand over its first batch."""
TRAIN = 0.04
"""Seconds of each step the user's loop trains (the rest waits for the batch)."""


def make(
    time: FakeTime,
    *,
    batches: int | None = 10_000,
    seconds: float = 1e9,
    retune: bool = True,
    record: Path | None = None,
) -> Tuner:
    options = TunerOptions(
        climb=ClimbOptions(max_workers=4, windows=2),
        budget=Budget(batches=batches, seconds=seconds),
        window_seconds=0.0,
        retune=retune,
        device="cpu",
        record=locate(record, None) if record is not None else None,
        epoch_batches=1000,
        retune_seconds=0.5,
    )
    return Tuner(Settings(batch_size=4), options, LOG, now=time)


def fastest_at_two(settings: Settings) -> float:
    """Step seconds: two workers are as fast as it gets; more only cost."""
    return {0: 0.1, 1: 0.06}.get(settings.num_workers, 0.04)


def drive(
    tuner: Tuner,
    time: FakeTime,
    steps: int,
    step_seconds: Callable[[Settings], float],
    *,
    hand_over: bool = False,
) -> None:
    """Run ``steps`` steps as the loader would: start the wanted config when it differs
    (persistence aside), then time each batch. ``hand_over``: a switch hands over, as
    the loader's does: the old config's prefetched batches (workers x 2) come first, at
    its pace, while the new workers start (unseen)."""
    old: Settings | None = None
    lead = 0
    for _ in range(steps):
        wanted, running = tuner.wanted, tuner.running
        if running is None or without_persistence(wanted) != without_persistence(running):
            old = running
            lead = 2 * running.num_workers if hand_over and running is not None else 0
            tuner.started(wanted, lead=lead)
            starting = lead == 0 and wanted.num_workers > 0
        else:
            starting = False
        assert tuner.running is not None
        pace = old if lead and old is not None else tuner.running
        asked = time.t
        time.t += STARTUP if starting else step_seconds(pace) - TRAIN  # the wait...
        lead = max(0, lead - 1)
        tuner.fetched(asked, 4)
        time.t += TRAIN  # ...and the training step on it


def test_it_settles_on_the_cheapest_fastest_config_with_persistent_workers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = make(time)
    drive(tuner, time, 200, fastest_at_two)
    assert tuner.climb is None
    # Restarting two workers (0.5 s) costs over 1% of an epoch (1000 x 0.04 s): kept.
    assert tuner.wanted == Settings(
        batch_size=4, num_workers=2, prefetch_factor=2, persistent_workers=True, worker_threads=1
    )
    settled = [r.getMessage() for r in caplog.records if "settled on" in r.getMessage()]
    assert len(settled) == 1
    assert "workers=2" in settled[0] and "2.50x the default loader's 40" in settled[0]
    assert settled[0].endswith("no move left that wins")


def test_a_spent_budget_settles_on_the_best_so_far(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    # No workers: 6 steps (start-up, 1 of warm-up, 2 windows of 2); two workers: 7 more
    # (start-up, 4 prefetched of warm-up, one window: 2.5x as fast is judged at once),
    # and kept; four workers: the budget ends 3 steps in.
    tuner = make(time, batches=16)
    drive(tuner, time, 40, fastest_at_two)
    assert tuner.climb is None
    assert tuner.wanted.num_workers == 2
    assert tuner.budget.spent_batches == 16
    assert "the budget ended the climb" in caplog.text


def test_a_sustained_drop_starts_another_climb(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = make(time)
    drive(tuner, time, 200, fastest_at_two)
    assert tuner.climb is None and tuner.watch is not None
    drive(tuner, time, 10, lambda s: 2 * fastest_at_two(s))  # half speed: below 0.7x
    assert tuner.climb is not None
    assert "climbing again from workers=2" in caplog.text
    assert tuner.climb.trying == without_persistence(tuner.wanted)


def test_a_short_dip_is_not_a_drop() -> None:
    time = FakeTime()
    tuner = make(time)
    drive(tuner, time, 200, fastest_at_two)
    drive(tuner, time, 6, lambda s: 2 * fastest_at_two(s))
    drive(tuner, time, 20, fastest_at_two)
    assert tuner.climb is None


def test_without_retune_it_stays_settled() -> None:
    time = FakeTime()
    tuner = make(time, retune=False)
    drive(tuner, time, 200, fastest_at_two)
    drive(tuner, time, 40, lambda s: 3 * fastest_at_two(s))
    assert tuner.climb is None and tuner.watch is None


def test_a_study_that_cannot_be_written_is_a_warning_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = make(time, record=tmp_path)  # a directory, not a study
    drive(tuner, time, 200, fastest_at_two)
    assert tuner.climb is None and tuner.result is None
    assert "could not record the choice" in caplog.text


def io_bound(settings: Settings) -> float:
    """Step seconds of loading that waits on storage: 0.2 s a batch, spread over the
    workers, under a training step of TRAIN."""
    return max(TRAIN, 0.2 / max(1, settings.num_workers))


def latency_tuner(time: FakeTime, *, batches: int) -> Tuner:
    options = TunerOptions(
        climb=ClimbOptions(max_workers=16, cpus=2, windows=3),
        budget=Budget(batches=batches, seconds=1e9),
        window_seconds=0.0,
        retune=False,
        device="cpu",
        epoch_batches=1000,
    )
    return Tuner(Settings(batch_size=4), options, LOG, now=time)


def drive_loads(tuner: Tuner, time: FakeTime, steps: int, cpu_share: float) -> None:
    """As :func:`drive`, telling the tuner the CPU time of each load without workers."""
    for _ in range(steps):
        wanted, running = tuner.wanted, tuner.running
        starting = running is None or without_persistence(wanted) != without_persistence(running)
        if starting:
            tuner.started(wanted)
        assert tuner.running is not None
        asked = time.t
        load = io_bound(tuner.running) - TRAIN
        time.t += STARTUP if starting and tuner.running.num_workers else load
        cpu = cpu_share * load if tuner.running.num_workers == 0 else 0.0
        tuner.fetched(asked, 4, cpu_seconds=cpu)
        time.t += TRAIN


def test_loads_that_leave_the_cpu_idle_jump_above_the_cpu_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    # A budget of 3 steps ends before the jump is judged: it runs over to judge it.
    tuner = latency_tuner(time, batches=3)
    drive_loads(tuner, time, 60, cpu_share=0.0)
    assert tuner.climb is None
    # 0.16 s loads, 0.04 s of training: 4 workers x 2 (the CPU idle) = 8, above the 2
    # CPUs: the most, 16.
    assert tuner.wanted.num_workers == 16
    assert "the budget ended the climb" in caplog.text


def test_loads_that_keep_the_cpu_busy_jump_no_further_than_the_cpus() -> None:
    time = FakeTime()
    tuner = latency_tuner(time, batches=3)
    drive_loads(tuner, time, 60, cpu_share=1.0)
    assert tuner.climb is None
    assert tuner.wanted.num_workers == 2  # no jump: the first neighbour, judged and kept


def test_a_loop_that_hardly_waits_settles_on_its_start_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = make(time)
    drive(tuner, time, 20, lambda settings: TRAIN + 0.0005)
    assert tuner.climb is None and tuner.wanted == Settings(batch_size=4)
    assert "waited 1.2% of its steps for data" in caplog.text


def test_a_slow_first_load_jumps_before_the_loop_loads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = latency_tuner(time, batches=1000)
    tuner.started(Settings(batch_size=4))
    asked = time.t
    time.t += 0.16  # the start-up batch, loaded in the loop's thread
    tuner.fetched(asked, 4, cpu_seconds=0.0)
    time.t += TRAIN
    tuner.asking(time.t)  # the loop asks for its second batch
    # 0.16 s loads, 0.04 s of training, the CPU idle: 4 workers x 2 = 8, above the 2
    # CPUs: the most, 16, before any second batch is loaded without workers.
    assert tuner.wanted.num_workers == 16
    assert "its first batch took 0.16 s to load, 80% of its step" in tuner._why


def test_a_handed_over_config_persists_once_an_epochs_start_shows_its_start_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    tuner = make(time)
    drive(tuner, time, 200, fastest_at_two, hand_over=True)
    assert tuner.climb is None
    # Two workers were reached from none (a cold start: 0.5 s seen whole), so they
    # persist at once, as in a climb without hand-overs.
    assert tuner.wanted == Settings(
        batch_size=4, num_workers=2, prefetch_factor=2, persistent_workers=True, worker_threads=1
    )
    assert tuner.startups[
        Settings(batch_size=4, num_workers=2, prefetch_factor=2, worker_threads=1).key()
    ] == pytest.approx(0.5)
    # Four workers were only handed over to: their start-up hidden, so unknown.
    assert (
        Settings(batch_size=4, num_workers=4, prefetch_factor=2, worker_threads=1).key()
        not in tuner.startups
    )


def test_persistence_waits_for_a_cold_start_when_the_choice_was_handed_over(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, LOG.name)
    time = FakeTime()
    study = tmp_path / "online.db"
    tuner = make(time, record=study)
    four = Settings(batch_size=4, num_workers=4, prefetch_factor=2, worker_threads=1)
    # Four workers are the fastest; the climb reaches them from two by a hand-over.
    drive(tuner, time, 300, lambda s: 0.02 + fastest_at_two(s) * (
        0.5 if s.num_workers >= 4 else 1.0), hand_over=True)  # fmt: skip
    assert tuner.climb is None
    assert without_persistence(tuner.wanted) == four
    assert not tuner.wanted.persistent_workers  # its start-up unknown yet
    assert "persistent workers from the next epoch" not in caplog.text
    assert autotune.load(study, check_machine=False).settings == tuner.wanted
    trials = len(optuna.load_study(study_name=None, storage=f"sqlite:///{study}").trials)
    # The next epoch starts its workers cold: 0.5 s, over 1% of an epoch (1000 steps
    # at the settled pace): persistent from the epoch after.
    tuner.epoch_ended(1000)
    tuner.started(tuner.wanted)
    asked = time.t
    time.t += STARTUP
    tuner.fetched(asked, 4)
    assert tuner.wanted == dataclasses.replace(four, persistent_workers=True)
    assert "persistent workers from the next epoch: starting 4 took 0.50 s" in caplog.text
    # The record follows: what the loader goes on with, and no trial twice.
    assert autotune.load(study, check_machine=False).settings == tuner.wanted
    assert tuner.result is not None and tuner.result.settings == tuner.wanted
    again = optuna.load_study(study_name=None, storage=f"sqlite:///{study}")
    assert len(again.trials) == trials
