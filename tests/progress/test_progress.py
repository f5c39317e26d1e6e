"""The progress of a search: plain lines in logs and CI, a live block on a terminal."""

from __future__ import annotations

import dataclasses
import io
import itertools
import re
import time

import pytest

from autotune import LineProgress, LiveProgress, Settings
from autotune._format import format_duration
from autotune.probe import Figures, Window
from autotune.progress._progress import Tracker, make_progress, outcome
from autotune.study import TrialRecord

SETTINGS = Settings(batch_size=8, num_workers=2, prefetch_factor=2, persistent_workers=True)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def record(number: int, value: float, state: str = "COMPLETE") -> TrialRecord:
    window = Window(index=0, seconds=1.0, samples=int(value), fresh=int(value), steps=9,
                    wait_seconds=0.1)  # fmt: skip
    return TrialRecord(
        number=number,
        state=state,
        role="explore",
        settings=SETTINGS,
        value=value,
        figures=Figures(windows=(window,)),
        failure=None,
        duration_s=None,
    )


def test_a_real_search_in_a_log_is_one_line_per_trial_and_stage(small_study) -> None:
    lines = small_study.progress.splitlines()
    assert all(re.match(r"\[ *\d+\.\ds\] ", line) for line in lines), lines
    assert "\x1b" not in small_study.progress  # nothing redraws in a log
    stages = [re.sub(r"^\[ *[\d.]+s\] ", "", line).split(":")[0] for line in lines]
    for stage in ("preflight", "explore", "confirm", "ceilings", "done"):
        assert stage in stages
    trials = [line for line in lines if "] trial #" in line]
    counts = [re.search(r"\[(\d+)/(\d+)(, ~\d+:\d\d left)?\]$", line) for line in trials]
    assert all(counts), trials
    done = [int(c.group(1)) for c in counts]
    planned = [int(c.group(2)) for c in counts]
    # The budget counts probed trials: a repeat of a measured config leaves the count.
    repeat = ["(same as #" in line for line in trials]
    explored = done.index(6) + 1
    assert done[:explored] == list(itertools.accumulate(int(not r) for r in repeat[:explored]))
    assert set(planned[:explored]) == {6}
    # then the finalists and the default loader, counted against their own plan
    confirming = len(trials) - explored
    assert confirming >= 2
    assert done[explored:] == list(range(1, confirming + 1))
    assert set(planned[explored:]) == {confirming}
    assert all(c.group(3) for c in counts)  # a time left once a trial has been timed
    assert sum("ceiling of" in line for line in lines) >= 4


def test_the_remaining_time_comes_from_the_trials_so_far() -> None:
    clock = FakeClock()
    tracker = Tracker(clock)
    tracker.phase("explore")
    tracker.plan(4, None, later=2)
    assert tracker.remaining() is None  # nothing timed yet
    for number, took in enumerate((2.0, 4.0)):
        tracker.trial_started(number, "explore", SETTINGS)
        clock.now += took
        tracker.trial_finished(record(number, 100.0 + number), None)
    # 2 more explore trials at their mean (3 s) and 2 later full trials at the full mean (3 s)
    assert tracker.remaining() == pytest.approx(2 * 3.0 + 2 * 3.0)
    clock.now += 1.0  # a second into the next trial
    tracker.trial_started(2, "explore", SETTINGS)
    assert tracker.remaining() == pytest.approx(2 * 3.0 - 1.0 + 2 * 3.0)
    assert tracker.count() == "2/4, ~0:11 left"


def test_trials_that_end_together_each_count_their_share_of_the_time() -> None:
    # Three trials measured in turns in one process of 9 s start and end together.
    clock = FakeClock()
    tracker = Tracker(clock)
    tracker.phase("confirm")
    tracker.plan(6, None, later=0)
    for number in range(3):
        tracker.trial_started(number, "confirm", SETTINGS)
    clock.now += 9.0
    for number in range(3):
        tracker.trial_finished(record(number, 100.0), None)
    assert tracker.remaining() == pytest.approx(3 * 3.0)


def test_a_timeout_bounds_the_time_left() -> None:
    clock = FakeClock()
    tracker = Tracker(clock)
    tracker.phase("explore")
    tracker.plan(100, 10.0, later=0)
    tracker.trial_started(0, "explore", SETTINGS)
    clock.now += 1.0
    tracker.trial_finished(record(0, 50.0), None)
    assert tracker.remaining() == pytest.approx(10.0 - 1.0 + 1.0)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0:00"), (42.4, "0:42"), (725, "12:05"), (3723, "1:02:03")]
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_make_progress_picks_lines_unless_on_a_terminal(monkeypatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    assert isinstance(make_progress(io.StringIO()), LineProgress)
    live = make_progress(Terminal())
    assert isinstance(live, LiveProgress)
    live.close()
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(make_progress(Terminal()), LineProgress)


def test_the_live_block_redraws_in_place_and_clears_at_the_end() -> None:
    terminal = Terminal()
    live = LiveProgress(terminal, interval=0)
    with live:
        live.phase("explore", "4 trials")
        live.plan("explore", 4, None, later=0)
        live.trial_started(0, "explore", SETTINGS)
        window = Window(index=0, seconds=0.5, samples=400, fresh=400, steps=50, wait_seconds=0.0)
        live.window(0, window, 800.0)
        assert live.status()[0].startswith("explore 0/4 | 0:00 elapsed")
        assert live.status()[1].startswith("now  #0 explore: window 1, 800 samples/s")
        live.trial_finished(record(0, 812.0), record(0, 812.0))
        status = live.status()
        assert status[0].startswith("explore 1/4 | 0:00 elapsed | ~0:00 left")
        assert status[1].startswith("best #0: 812 samples/s  workers=2 prefetch=2")
        assert len(status) == 2  # no trial running
    text = terminal.getvalue()
    # The trial's line is printed once, above the block; the block was redrawn in place.
    assert text.count("trial #0   explore") == 1
    assert "\r\x1b[J" in text and "\x1b[1A\x1b[J" in text
    assert text.endswith("\x1b[J")  # closing cleared the block


def test_the_clock_redraws_between_events_and_stops_when_done() -> None:
    terminal = Terminal()
    live = LiveProgress(terminal, interval=0.01)
    live.phase("preflight", "one step")
    deadline = time.monotonic() + 5
    while terminal.getvalue().count("preflight | ") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert terminal.getvalue().count("preflight | ") >= 3  # redrawn with no new event
    live.phase("done", "the best")
    assert live._ticker is None
    written = terminal.getvalue()
    assert written.endswith("\x1b[J") and "done: the best\n" in written
    time.sleep(0.05)
    assert terminal.getvalue() == written  # nothing drawn after the end


def test_the_clock_stops_by_itself_when_nothing_happens() -> None:
    live = LiveProgress(Terminal(), interval=0.01, idle=0.03)
    live.phase("explore", "4 trials")
    ticker = live._ticker
    assert ticker is not None
    ticker.join(timeout=5)
    assert not ticker.is_alive()
    live.message("an event starts it again")
    assert live._ticker is not ticker and live._ticker.is_alive()
    live.close()
    assert not ticker.is_alive() and live._ticker is None


def test_a_repeat_says_which_trial_it_repeats_and_spends_no_budget() -> None:
    clock = FakeClock()
    tracker = Tracker(clock)
    tracker.phase("explore")
    tracker.plan(4, None, later=0)
    tracker.trial_started(0, "explore", SETTINGS)
    clock.now += 2.0
    tracker.trial_finished(record(0, 100.0, "PRUNED"), None)
    for state in ("COMPLETE", "PRUNED"):
        repeat = dataclasses.replace(record(1, 100.0, state), duplicate_of=0)
        assert outcome(repeat).endswith(" (same as #0)")
        tracker.trial_started(1, "explore", SETTINGS)
        tracker.trial_finished(repeat, None)
    assert tracker.count() == "1/4, ~0:06 left"  # 3 more probes at the one's 2 s
    assert outcome(record(2, 100.0)) == "100 samples/s"
