"""The online loader's decisions, alone: the climb, the clock's windows, the budget, the
watch, and the epoch order. No DataLoader, no process."""

from __future__ import annotations

import itertools

import pytest
from fake_clock import FakeTime

from autotune import Settings
from autotune.inloop._budget import Budget
from autotune.inloop._climb import (
    CPU_BOUND,
    SHORT_PREFETCH,
    Climb,
    ClimbOptions,
    jump,
    keeps,
    neighbours,
    noise,
    wants_persistent,
)
from autotune.inloop._clock import WARM_UP, StepClock
from autotune.inloop._order import EpochOrder, RemainingBatches, epoch_length
from autotune.inloop._watch import Watch
from autotune.probe import Window

OPTIONS = ClimbOptions(max_workers=8, windows=3, tolerance=0.03)


def s(workers: int = 0, prefetch: int | None = None, pin: bool = False) -> Settings:
    if workers and prefetch is None:
        prefetch = 2
    # Workers the climb starts cap their native threads (none to cap without workers).
    return Settings(
        batch_size=32,
        num_workers=workers,
        prefetch_factor=prefetch,
        pin_memory=pin,
        worker_threads=1,
    )


def window(rate: float, index: int = 0, wait: float = 0.2) -> Window:
    """One second of 4 steps; ``wait`` of it spent waiting for data (by default enough
    to climb, too little to jump)."""
    return Window(index=index, seconds=1.0, samples=round(rate), fresh=round(rate), steps=4,
                  wait_seconds=wait)  # fmt: skip


# ----------------------------------------------------------------- keeping a move
@pytest.mark.parametrize(
    ("candidate_rates", "kept"),
    [
        ([102.0, 102.0, 102.0], False),  # +2%: inside the 3% tolerance
        ([104.0, 104.0, 104.0], True),  # +4%: beyond it
    ],
)
def test_a_dearer_move_must_beat_the_tolerance(candidate_rates: list[float], kept: bool) -> None:
    current = [100.0, 100.0, 100.0]
    assert keeps(s(2), candidate_rates, s(1), current, 0.03) is kept


@pytest.mark.parametrize(("candidate", "kept"), [(115.0, False), (125.0, True)])
def test_a_dearer_move_must_beat_the_noise_between_windows(candidate: float, kept: bool) -> None:
    noisy = [80.0, 100.0, 120.0]  # stdev / mean = 20%
    assert noise(noisy, [candidate] * 3, 0.03) == pytest.approx(0.2)
    assert keeps(s(2), [candidate] * 3, s(1), noisy, 0.03) is kept


@pytest.mark.parametrize(("candidate", "kept"), [(98.0, True), (96.0, False)])
def test_a_cheaper_move_is_kept_unless_slower_beyond_noise(candidate: float, kept: bool) -> None:
    assert keeps(s(1), [candidate] * 3, s(2), [100.0] * 3, 0.03) is kept


def test_the_medians_are_compared_so_one_wild_window_does_not_decide() -> None:
    assert not keeps(s(2), [100.0, 100.0, 1000.0], s(1), [100.0, 100.0, 100.0], 0.03)


# ----------------------------------------------------------------- where it may go
def test_from_no_workers_the_moves_are_two_workers_then_one() -> None:
    assert neighbours(s(0), OPTIONS) == [s(2), s(1)]


def test_neighbours_double_step_deepen_then_halve() -> None:
    assert neighbours(s(2), OPTIONS) == [s(4), s(3), s(2, prefetch=4), s(1)]


def test_neighbours_stay_within_the_cpu_share_and_prefetch_cap() -> None:
    capped = ClimbOptions(max_workers=2, max_prefetch=4)
    assert neighbours(s(2, prefetch=4), capped) == [s(1, prefetch=4)]
    # From below the most, doubling past it tries the most.
    assert neighbours(s(11), ClimbOptions(max_workers=16))[0] == s(16)


def test_pinned_memory_is_tried_only_when_allowed() -> None:
    assert s(1, pin=True) not in neighbours(s(1), OPTIONS)
    assert s(1, pin=True) in neighbours(s(1), ClimbOptions(max_workers=8, pin_memory=True))


def test_dropping_to_no_workers_drops_the_worker_knobs() -> None:
    (down,) = [n for n in neighbours(s(1, prefetch=4), OPTIONS) if n.num_workers == 0]
    assert down == s(0)


# ----------------------------------------------------------------- the climb
def run_climb(start: Settings, rate_of: dict[tuple[int, int], float]) -> Climb:
    """Feed the climb steady windows of each config's rate until it is done."""
    climb = Climb(start, OPTIONS)
    for index in itertools.count():
        if climb.done:
            return climb
        trying = climb.trying
        climb.add(window(rate_of[(trying.num_workers, trying.prefetch_factor or 2)], index))
        assert index < 100, "the climb never ended"
    raise AssertionError  # unreachable


def test_the_climb_stops_at_the_peak_and_keeps_no_noise_move() -> None:
    rates = {(0, 2): 100, (1, 2): 180, (2, 2): 300, (3, 2): 305, (4, 2): 320, (8, 2): 250,
             (5, 2): 321, (4, 4): 322, (2, 4): 300, (1, 4): 180}  # fmt: skip
    climb = run_climb(s(0), {k: float(v) for k, v in rates.items()})
    # 0 -> 2 -> 4 (each kept at once); from 4: 8 slower, 5 and prefetch 4 within the
    # 3% tolerance; 2 measured already.
    assert climb.current == s(4)
    tried = [settings for settings, _ in climb.measured()]
    assert tried == [s(0), s(2), s(4), s(8), s(5), s(4, prefetch=4)]


def test_the_climb_comes_down_from_a_dear_start() -> None:
    rates = {(8, 2): 300.0, (16, 2): 200.0, (9, 2): 290.0, (8, 4): 295.0, (4, 2): 299.0,
             (2, 2): 150.0, (5, 2): 290.0, (4, 4): 290.0, (3, 2): 200.0}  # fmt: skip
    climb = run_climb(s(8), rates)
    assert climb.current == s(4)  # as fast within the noise, and cheaper


def test_a_finished_budget_stands_on_the_best_kept() -> None:
    climb = Climb(s(0), OPTIONS)
    # Two workers, three times as fast, are kept after one window; four are measuring.
    for rate in (100.0, 100.0, 100.0, 300.0, 300.0):
        climb.add(window(rate))
    assert climb.trying == s(4)
    climb.finish()
    assert climb.done and climb.current == climb.trying == s(2)
    assert climb.add(window(1.0)) is None


def test_verdicts_say_what_was_kept_and_why() -> None:
    climb = Climb(s(0), ClimbOptions(max_workers=8, windows=1))
    assert climb.add(window(100.0)) is None
    verdict = climb.add(window(200.0))
    assert verdict is not None and verdict.kept
    assert "kept workers=2" in verdict.describe() and "against 100" in verdict.describe()


# ----------------------------------------------------------------- persistence
@pytest.mark.parametrize(
    ("startup", "epoch", "keep"),
    [(0.5, 10.0, True), (0.05, 10.0, False), (None, 10.0, False), (0.5, None, False)],
)
def test_workers_persist_when_restarting_them_costs_a_percent_of_an_epoch(
    startup: float | None, epoch: float | None, keep: bool
) -> None:
    assert wants_persistent(startup, epoch) is keep


# ----------------------------------------------------------------- the clock
def test_the_clock_times_whole_steps_and_skips_start_up_and_warm_up() -> None:
    time = FakeTime()
    clock = StepClock(window_seconds=0.0, min_steps=2, now=time)
    closed = []
    for step in range(7):
        asked = time.t
        time.t += 1.0 if step == 0 else 0.1  # start-up, then 0.1 s waits...
        _, closed_window = clock.fetched(asked, samples=4)
        time.t += 0.4  # ...and 0.4 s of the user's own step
        if closed_window is not None:
            closed.append(closed_window)
    assert clock.startup_s == pytest.approx(1.0)
    # Step 1 is warm-up (no workers prefetched: one step), returned for a first look
    # only; 2-3 and 4-5 make two windows of 2 steps, 0.5 s each; step 6 starts a third.
    warm_up, *closed = closed
    assert warm_up.index == WARM_UP and warm_up.steps == 1
    assert len(closed) == 2
    assert closed[0].steps == 2 and closed[0].samples == 8
    assert closed[0].seconds == pytest.approx(1.0)
    assert closed[0].wait_seconds == pytest.approx(0.2)
    assert closed[0].samples_per_s == pytest.approx(8.0)
    assert [w.index for w in closed] == [0, 1]


def test_the_warm_up_lasts_as_many_steps_as_the_workers_prefetched() -> None:
    time = FakeTime()
    clock = StepClock(window_seconds=0.0, min_steps=2, now=time)
    clock.restart(prefetched=8)  # e.g. 4 workers x prefetch 2, all ready at once
    steps, closed = 0, []
    while len(closed) < 2 and steps < 20:
        asked = time.t
        time.t += 0.1
        _, window = clock.fetched(asked, samples=4)
        steps += 1
        closed += [window] if window is not None else []
    assert steps == 1 + 8 + 2  # start-up, warm-up, one window
    assert [(w.index, w.steps) for w in closed] == [(WARM_UP, 8), (0, 2)]


def test_a_restart_makes_the_next_batch_start_up_again() -> None:
    time = FakeTime()
    clock = StepClock(window_seconds=10.0, now=time)
    clock.fetched(time.t, 4)
    assert not clock.starting
    clock.restart()
    assert clock.starting


def test_a_hand_overs_lead_is_neither_start_up_nor_warm_up_nor_window() -> None:
    time = FakeTime()
    clock = StepClock(window_seconds=0.0, min_steps=2, now=time)
    clock.fetched(time.t, 4)
    time.t += 0.1
    clock.restart(prefetched=2, lead=3)  # the old workers still hand over 3 batches
    seen = []
    for step in range(8):
        assert clock.leading is (step < 3)
        assert clock.starting is (step == 3)
        asked = time.t
        time.t += 0.3 if step == 3 else 0.01  # the new workers' first batch waits 0.3 s
        seconds, window = clock.fetched(asked, samples=4)
        seen.append((round(seconds, 2), None if window is None else (window.index, window.steps)))
        time.t += 0.1
    assert seen[:3] == [(0.11, None)] * 3  # whole steps, for the budget
    assert seen[3] == (0.3, None) and clock.startup_s == pytest.approx(0.3)
    assert [w for _, w in seen[4:] if w is not None] == [(WARM_UP, 2), (0, 2)]


# ----------------------------------------------------------------- budget and watch
def test_the_budget_ends_at_its_share_of_an_epoch_or_its_seconds() -> None:
    budget = Budget.of(epoch_batches=100, fraction=0.05, seconds=60.0)
    assert budget.batches == 5
    for _ in range(4):
        budget.spend(0.1)
    assert not budget.over
    budget.spend(0.1)
    assert budget.over
    timed = Budget.of(epoch_batches=None, fraction=0.05, seconds=1.0)
    assert timed.batches is None
    timed.spend(1.5)
    assert timed.over and not timed.fresh().over


def test_the_watch_can_take_the_climbs_figure_as_settled() -> None:
    watch = Watch(settled=100.0, ratio=0.7, sustained=2)
    assert [watch.add(60.0), watch.add(60.0)] == [False, True]


def test_a_drop_must_last_its_seconds_too() -> None:
    watch = Watch(settled=100.0, ratio=0.7, sustained=2, seconds=10.0)
    assert [watch.add(60.0, 4.0) for _ in range(3)] == [False, False, True]


def test_the_watch_wants_a_sustained_drop() -> None:
    watch = Watch(ratio=0.7, sustained=3, reference=2)
    assert not any(watch.add(r) for r in (100.0, 100.0))
    assert watch.settled == 100.0
    assert not watch.add(50.0) and not watch.add(50.0)
    assert not watch.add(90.0)  # a recovery starts the count again
    assert [watch.add(60.0) for _ in range(3)] == [False, False, True]


# ----------------------------------------------------------------- the order
def test_remaining_batches_continue_from_the_first_not_handed() -> None:
    order = EpochOrder.draw(range(10), batch_size=3, drop_last=False)
    assert len(order) == 4
    assert order.hand() == [0, 1, 2]
    sampler = RemainingBatches(order.remaining())
    assert list(sampler) == [[3, 4, 5], [6, 7, 8], [9]] and len(sampler) == 3


def test_cutting_remaining_batches_ends_the_iteration_where_it_stands() -> None:
    sampler = RemainingBatches([[0], [1], [2], [3]])
    assert sampler.cut() == 0  # never iterated
    batches = iter(sampler)
    assert [next(batches), next(batches)] == [[0], [1]]
    assert sampler.cut() == 2
    assert list(batches) == []
    assert list(sampler) == [[0], [1], [2], [3]]  # a new iteration is whole again


def test_epoch_length_counts_as_a_dataloader_does() -> None:
    assert epoch_length(range(10), None, 3, drop_last=False) == 4
    assert epoch_length(range(10), None, 3, drop_last=True) == 3
    assert epoch_length(object(), None, 3, drop_last=False) is None


# ----------------------------------------------------------------- the shortcuts
def waiting(rate: float, wait: float, steps: int = 4) -> Window:
    """One second of ``steps`` steps, ``wait`` of it waiting for data."""
    return Window(index=0, seconds=1.0, samples=round(rate), fresh=round(rate), steps=steps,
                  wait_seconds=wait)  # fmt: skip


LATENCY = ClimbOptions(max_workers=16, cpus=2, windows=3)


@pytest.mark.parametrize(
    ("wait", "cpu_share", "workers"),
    [
        (0.75, 0.0, 16),  # 0.1875 s loads, 0.0625 s of training: 3 x 2 (idle CPU) = 6,
        # more than the 2 CPUs: the most, at once
        (0.4, 0.0, None),  # 0.1 s loads, 0.15 s of training: 1 x 2 = 2, the first neighbour
        (0.75, 0.9, 2),  # the same loads on the CPU: 3 x 1.25 -> 4, but at most the CPUs,
        # which fall short: queued deeper
        (0.95, 0.0, 16),  # far more wanted than the most: the most
        (0.95, 0.9, 2),  # CPU-bound loading: no more than the CPUs, queued deeper
        (0.3, 0.0, None),  # 1 worker would do: no further than the first neighbour
        (0.3, 0.9, None),  # on the CPU too: 1 x 1.25 -> 1 worker, within the CPUs
    ],
)
def test_a_jump_aims_at_the_workers_that_feed_the_loop(
    wait: float, cpu_share: float, workers: int | None
) -> None:
    leap = jump(s(0), [waiting(100.0, wait)], LATENCY, cpu_share)
    if workers is None:
        assert leap is None
    elif cpu_share >= CPU_BOUND:
        assert leap == s(workers, prefetch=SHORT_PREFETCH)
    else:
        assert leap == s(workers)


def test_loading_the_cpus_cannot_keep_up_with_queues_deeper_but_never_shallower() -> None:
    # CPU-bound, 0.2 s loads and 0.05 s of training: 5 workers wanted, 4 CPUs.
    options = ClimbOptions(max_workers=16, cpus=4, windows=3)
    assert jump(s(0), [waiting(100.0, 0.8)], options, 0.9) == s(4, prefetch=4)
    # Started at the CPUs with prefetch 8: nothing deeper to queue, no jump.
    assert jump(s(4, prefetch=8), [waiting(100.0, 0.8)], options, None) is None
    # A climb that may not queue 4 deep jumps as before: 2 CPUs, the first neighbour.
    shallow = ClimbOptions(max_workers=16, cpus=2, windows=3, max_prefetch=2)
    assert jump(s(0), [waiting(100.0, 0.8)], shallow, 0.9) is None


def test_with_workers_a_jump_counts_each_workers_load_as_that_many_steps() -> None:
    # 2 workers, steps of 0.25 s of which 0.2 waiting: a batch takes a worker 0.5 s,
    # training one 0.05 s: 10 workers x 1.25 -> 13.
    leap = jump(s(2), [waiting(100.0, 0.8)], LATENCY, cpu_share=None)
    # Unknown CPU share: stays within the CPUs (2 is where it is), which fall short.
    assert leap == s(2, prefetch=SHORT_PREFETCH)
    leap = jump(s(2), [waiting(100.0, 0.8)], ClimbOptions(max_workers=16, cpus=16), None)
    assert leap == s(13)


def test_a_start_that_waits_most_of_its_steps_is_judged_after_one_window_and_jumps() -> None:
    climb = Climb(s(0), LATENCY)
    assert climb.add(waiting(100.0, 0.95), cpu_share=0.0) is None
    assert climb.trying == s(16)  # the jump first, before the neighbours 2 and 1


def test_a_start_that_hardly_waits_ends_the_climb_at_once() -> None:
    climb = Climb(s(0), LATENCY)
    climb.add(waiting(100.0, 0.02))
    assert climb.done and climb.current == s(0) and not climb.judged


def test_a_start_that_waits_some_is_measured_for_every_window() -> None:
    climb = Climb(s(0), LATENCY)
    climb.add(waiting(100.0, 0.2))
    climb.add(waiting(100.0, 0.2))
    assert climb.trying == s(0)
    climb.add(waiting(100.0, 0.2))
    assert climb.trying == s(2)


@pytest.mark.parametrize(("rate", "judged"), [(151.0, True), (149.0, False), (66.0, True)])
def test_a_candidate_far_from_the_current_is_judged_after_one_window(
    rate: float, judged: bool
) -> None:
    climb = Climb(s(0), LATENCY)
    for _ in range(3):
        climb.add(waiting(100.0, 0.2))
    verdict = climb.add(waiting(rate, 0.2))
    assert (verdict is not None) is judged
    assert climb.judged is judged


def test_a_warm_up_that_waits_most_of_its_time_is_enough_to_jump() -> None:
    climb = Climb(s(0), LATENCY)
    climb.glance(waiting(100.0, 0.2, steps=1))
    assert climb.trying == s(0)  # waiting a fifth: the start is measured as usual
    climb.glance(waiting(100.0, 0.95, steps=1), cpu_share=0.0)
    assert climb.trying == s(16)


def test_only_the_starts_first_warm_up_is_glanced_at() -> None:
    climb = Climb(s(0), LATENCY)
    climb.add(waiting(100.0, 0.2))
    climb.glance(waiting(100.0, 0.95, steps=1), cpu_share=0.0)
    assert climb.trying == s(0) and len(climb.rates(s(0))) == 1


def test_the_first_look_is_the_start_up_load_and_the_training_on_it() -> None:
    time = FakeTime()
    clock = StepClock(window_seconds=10.0, now=time)
    assert clock.first_look(time.t) is None  # nothing started yet
    asked = time.t
    time.t += 0.3
    clock.fetched(asked, samples=4)  # the start-up batch: a 0.3 s load
    time.t += 0.1  # the loop trains on it
    look = clock.first_look(time.t)
    assert look is not None and look.index == WARM_UP and look.steps == 1
    assert look.wait_seconds == pytest.approx(0.3) and look.seconds == pytest.approx(0.4)
    assert look.samples == 4
    assert clock.first_look(time.t) is None  # once per start-up
