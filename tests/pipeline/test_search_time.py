"""A search's time by stage: timed at the phases it announces, kept in its result, shown."""

from __future__ import annotations

import dataclasses

import pytest
from fake_clock import FakeTime
from machines import TWO_CPUS

from autotune import QuietProgress, SearchResult, Settings
from autotune._format import format_seconds, format_wall
from autotune.output import result_lines, show_json
from autotune.probe import Figures, Window
from autotune.progress import StageClock
from autotune.result import SearchTime


class Phases(QuietProgress):
    """Keeps the phases and messages it is told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def phase(self, name: str, detail: str) -> None:
        self.events.append(("phase", name, detail))

    def message(self, text: str) -> None:
        self.events.append(("message", text))


def test_each_stage_runs_from_its_phase_to_the_next_and_done_ends_none() -> None:
    clock, inner = FakeTime(), Phases()
    timed = StageClock(inner, clock=clock)
    clock.t = 0.5  # the setup before the preflight: in the total, in no stage
    for stage, seconds in [("preflight", 1.0), ("explore", 80.0), ("confirm", 30.0)]:
        timed.phase(stage, "detail")
        timed.message(f"in {stage}")
        clock.t += seconds
    timed.phase("confirm", "again")  # a stage announced twice: one figure, both spans
    clock.t += 2.0
    times = timed.stop(continued=True)
    timed.phase("done", "the summary")
    clock.t += 5.0

    assert times == SearchTime(
        total_s=113.5,
        stages=(("preflight", 1.0), ("explore", 80.0), ("confirm", 32.0)),
        continued=True,
    )
    assert timed.stop() is times  # stopped once: a later call changes nothing
    assert times.seconds("explore") == 80.0 and times.seconds("bounds") is None
    # Every event reached the display, in order.
    assert [e for e in inner.events if e[0] == "phase"] == [
        ("phase", "preflight", "detail"),
        ("phase", "explore", "detail"),
        ("phase", "confirm", "detail"),
        ("phase", "confirm", "again"),
        ("phase", "done", "the summary"),
    ]
    assert ("message", "in explore") in inner.events


@pytest.mark.parametrize(
    ("seconds", "stage", "wall"),
    [(0.04, "0.0 s", "0.0 s"), (0.44, "0.4 s", "0.4 s"), (9.96, "10 s", "10 s"),
     (59.6, "60 s", "1 min 0 s"), (108.4, "108 s", "1 min 48 s"), (3725, "3725 s", "1 h 2 min")],
)  # fmt: skip
def test_wall_times_read_in_words(seconds: float, stage: str, wall: str) -> None:
    assert (format_seconds(seconds), format_wall(seconds)) == (stage, wall)


def _result(search_time: SearchTime | None) -> SearchResult:
    window = Window(index=0, seconds=1.0, samples=800, fresh=800, steps=100, wait_seconds=0.1)
    return SearchResult(
        settings=Settings(batch_size=8),
        figures=Figures(windows=(window,)),
        device="cpu",
        machine=TWO_CPUS,
        is_default=True,
        search_time=search_time,
    )


def test_show_prints_the_time_in_one_line_and_the_study_keeps_it_both_ways() -> None:
    times = SearchTime(
        total_s=250.2,
        stages=(("preflight", 1.2), ("bounds", 73.0), ("workers", 4.0), ("explore", 84.0)),
    )
    result = _result(times)
    assert result_lines(result)[-1] == (
        "search time: 4 min 10 s (preflight 1.2 s, bounds 73 s, worker sweep 4.0 s, explore 84 s)"
    )
    assert show_json(result, [], None)["result"]["search_time"]["stages"][1] == ["bounds", 73.0]

    kept = result.to_dict()
    assert SearchResult.from_dict(kept).search_time == times
    continued = dataclasses.replace(times, continued=True)
    assert result_lines(_result(continued))[-1].endswith(
        "; this search only, which continued the study's earlier ones"
    )

    # A study written before the time was kept reads, and shows no time.
    del kept["search_time"]
    old = SearchResult.from_dict(kept)
    assert old.search_time is None
    assert not any(line.startswith("search time") for line in result_lines(old))
    assert show_json(old, [], None)["result"]["search_time"] is None
