"""The checker's final set of rounds (benchmarks/generalise/_rounds.py) and the verdicts
judged on it: the leaders picked by the first set, ratios paired within a round."""

from __future__ import annotations

import json
import random
import statistics
import types
from pathlib import Path
from typing import Any

import pytest

from autotune import Settings
from autotune.machine._machine import Machine
from benchmarks import _cli
from benchmarks.common._checker import round_order
from benchmarks.generalise import _report as _generalise_report
from benchmarks.generalise import _rounds as _generalise_rounds
from benchmarks.generalise._check import GeneraliseOptions
from benchmarks.generalise._rounds import RoundsOptions, finalists, measure_rounds
from benchmarks.generalise._targets import assess, paired_ratio

MACHINE = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")


def row(workers: int, rounds: list[float | None], **roles: Any) -> dict[str, Any]:
    """A checker measurement of ``workers=N`` with its first-set rounds."""
    figures = [r for r in rounds if r is not None]
    return {
        "settings": Settings(batch_size=32, num_workers=workers).to_dict(),
        "describe": f"w={workers}",
        "rounds": rounds,
        "median": statistics.median(figures),
        "spread": 0.0,
        "errors": [],
        "default": False,
        "grid": False,
        "seeds": [],
        **roles,
    }


def with_final(measurement: dict[str, Any], final: list[float | None]) -> dict[str, Any]:
    figures = [r for r in final if r is not None]
    return {
        **measurement,
        "final": final,
        "final_median": statistics.median(figures),
        "final_spread": 0.0,
        "final_errors": [],
    }


def searches(*seeds: int) -> list[dict[str, Any]]:
    return [
        {
            "seed": seed,
            "describe": "x",
            "is_default": False,
            "interval": [0.0, 1e9],
            "wall_s": 10.0,
            "space_size": 100,
        }
        for seed in seeds
    ]


def judged(measurements: list[dict[str, Any]], *seeds: int) -> dict[str, Any]:
    return assess(measurements, searches(*seeds), rounds=3, measurement_s=1.0)


# --------------------------------------------------------------------- which configs go on
def test_the_final_set_takes_the_default_the_choices_and_the_leading_grid_points() -> None:
    measurements = [
        row(0, [50.0, 50.0, 50.0], default=True),
        row(1, [90.0, 90.0, 90.0], grid=True),
        row(2, [100.0, 100.0, 100.0], grid=True, seeds=[2]),
        row(3, [70.0, 70.0, 70.0], grid=True),
        row(4, [95.0, 95.0, 95.0], grid=True),
        row(5, [60.0, 60.0, 60.0], seeds=[1, 3]),  # off the grid
        row(6, [80.0, 80.0, 80.0], grid=True),
    ]
    assert finalists(measurements, leaders=3) == [0, 1, 2, 4, 5]
    assert finalists(measurements, leaders=1) == [0, 2, 5]
    assert finalists(measurements, leaders=4) == [0, 1, 2, 4, 5, 6]


def twin_row(rounds: list[float | None], threads: int, **roles: Any) -> dict[str, Any]:
    """A grid point with no workers and ``threads`` training threads."""
    return {
        **row(0, rounds, grid=True, **roles),
        "settings": Settings(batch_size=32, threads=threads).to_dict(),
        "describe": f"w=0 t={threads}",
    }


def test_the_default_s_twin_is_the_grid_point_with_its_settings_and_a_thread_per_cpu() -> None:
    measurements = [
        row(0, [50.0, 50.0, 50.0], default=True),
        twin_row([90.0, 90.0, 90.0], threads=1),
        twin_row([40.0, 40.0, 40.0], threads=2),
        row(1, [95.0, 95.0, 95.0], grid=True),
    ]
    assert _generalise_rounds.default_twin(measurements, cpus=2) == 2
    assert _generalise_rounds.default_twin(measurements, cpus=1) == 1
    assert _generalise_rounds.default_twin(measurements, cpus=4) is None
    # the last grid point by first median, and the final set takes it with the cpus
    assert finalists(measurements, leaders=2) == [0, 1, 3]
    assert finalists(measurements, leaders=2, cpus=2) == [0, 1, 2, 3]
    # a default that sets its threads has no twin: the grid names what it sets
    pinned = [{**measurements[0], "settings": Settings(batch_size=32, threads=2).to_dict()}]
    assert _generalise_rounds.default_twin(pinned + measurements[1:], cpus=2) is None


def test_the_checker_against_itself_is_the_default_over_its_twin_within_each_round() -> None:
    default = row(0, [50.0, 60.0, 70.0], default=True, seeds=[1])
    twin = twin_row([100.0, 60.0, 35.0], threads=2)
    leader = row(1, [95.0, 95.0, 95.0], grid=True)
    first = assess([default, twin, leader], searches(1), rounds=3, measurement_s=1.0, cpus=2)
    assert first["figures"]["twin"] == {
        "describe": "w=0 t=2",
        "judged_on": "first rounds",
        "rounds": 3,
        "ratio": 1.0,  # 0.5, 1.0, 2.0
    }
    final = [
        with_final(default, [50.0, 50.0, 50.0, 50.0, 50.0]),
        with_final(twin, [50.0, 100.0, 62.5, 62.5, 40.0]),
        with_final(leader, [100.0] * 5),
    ]
    twin_figure = assess(final, searches(1), rounds=3, measurement_s=1.0, cpus=2)["figures"]["twin"]
    assert twin_figure["judged_on"] == "final rounds" and twin_figure["rounds"] == 5
    assert twin_figure["ratio"] == pytest.approx(0.8)  # 1, 0.5, 0.8, 0.8, 1.25
    assert assess(final, searches(1), rounds=3, measurement_s=1.0)["figures"]["twin"] is None


# --------------------------------------------------------------------- paired verdicts
def test_a_ratio_is_paired_within_each_round_and_skips_failed_rounds() -> None:
    assert paired_ratio([100.0, 50.0, 200.0], [100.0, 100.0, 100.0]) == 1.0
    # the machine twice as fast in round 3: the medians would read 100 / 150
    assert paired_ratio([90.0, 90.0, 180.0], [100.0, 100.0, 200.0]) == pytest.approx(0.9)
    assert paired_ratio([90.0, None, 180.0], [100.0, 100.0, None]) == pytest.approx(0.9)
    assert paired_ratio([None], [100.0]) == 0.0


def test_a_grid_best_read_high_by_its_first_rounds_does_not_fail_a_choice_the_final_set_ties() -> (
    None
):
    """The first set's best (w=4) was one lucky reading; measured again beside the choice,
    the choice trains as fast as every leader in every round."""
    measurements = [
        with_final(row(0, [60.0, 60.0, 60.0], default=True), [60.0, 50.0, 70.0, 60.0, 55.0]),
        row(1, [80.0, 80.0, 80.0], grid=True),
        with_final(
            row(2, [90.0, 90.0, 90.0], grid=True, seeds=[1]), [100.0, 80.0, 120.0, 100.0, 90.0]
        ),
        with_final(row(3, [85.0, 88.0, 86.0], grid=True), [99.0, 80.0, 119.0, 99.0, 90.0]),
        with_final(row(4, [130.0, 95.0, 90.0], grid=True), [98.0, 81.0, 118.0, 100.0, 89.0]),
    ]
    figures = judged(measurements, 1)["figures"]
    assert figures["judged_on"] == "final rounds"
    (choice,) = figures["choices"]
    assert choice["first_vs_grid"] == pytest.approx(90 / 95)  # below 0.97 on the first set
    assert figures["grid_best"]["describe"] == "w=2"  # the choice is the best leader
    assert choice["vs_grid"] == 1.0
    # the leader the first set ranked first, graded on the final rounds
    assert figures["first_leader"] == {"describe": "w=4", "samples_per_s": 98.0}
    assert choice["vs_first_leader"] == pytest.approx(90 / 89)
    assert choice["vs_default"] == pytest.approx(
        statistics.median([100 / 60, 1.6, 120 / 70, 100 / 60, 90 / 55])
    )
    assert choice["samples_per_s"] == 100.0  # the final median, for the printed interval


def test_against_the_leader_the_final_rounds_read_highest_a_tie_reads_below_1() -> None:
    """Three leaders and a choice (a grid point too) that all train at 1,000 samples/s,
    each final reading off by up to 30% (the default against its twin read 0.86-1.10 in
    final sets) and each round's machine speed by up to 30%. The grid best, the grid point
    the final rounds read highest, is the highest of four noisy medians, so against it
    such a choice reads below 1 on average: the verdicts err against the search. Against
    the leader the first set ranked first, graded on rounds that did not pick it, it reads
    about 1."""
    generator = random.Random(13)
    verdict_readings, first_leader_readings = [], []
    for _ in range(400):
        speeds = [generator.uniform(0.7, 1.3) for _ in range(5)]

        def final(speeds: list[float] = speeds) -> list[float | None]:
            return [1000.0 * speed * generator.uniform(0.7, 1.3) for speed in speeds]

        measurements = [
            with_final(row(0, [500.0] * 3, default=True), final()),
            with_final(row(1, [1100.0] * 3, grid=True), final()),
            with_final(row(2, [1050.0] * 3, grid=True), final()),
            with_final(row(3, [1020.0] * 3, grid=True), final()),
            with_final(row(5, [900.0] * 3, grid=True, seeds=[1]), final()),
        ]
        (choice,) = judged(measurements, 1)["figures"]["choices"]
        verdict_readings.append(choice["vs_grid"])
        first_leader_readings.append(choice["vs_first_leader"])
    assert statistics.mean(verdict_readings) < 0.96
    assert 0.98 < statistics.mean(first_leader_readings) < 1.03


def test_a_choice_slower_than_a_leader_in_every_final_round_fails() -> None:
    measurements = [
        with_final(row(0, [60.0, 60.0, 60.0], default=True), [60.0, 60.0, 60.0]),
        with_final(row(1, [100.0, 90.0, 95.0], grid=True), [100.0, 150.0, 80.0]),
        with_final(row(2, [90.0, 95.0, 92.0], grid=True, seeds=[1]), [90.0, 138.0, 75.0]),
    ]
    result = judged(measurements, 1)
    (choice,) = result["figures"]["choices"]
    assert choice["vs_grid"] == pytest.approx(0.92)  # 0.90, 0.92, 0.9375
    median_verdict, worst_verdict, *_ = result["verdicts"]
    assert not median_verdict["passed"] and not worst_verdict["passed"]


def test_the_default_row_reads_the_grid_best_as_the_choices_do() -> None:
    """Paired within the final rounds: 0.5, 0.5 and 1.11 give 0.5, where the ratio of the
    medians (100 over 100) would print 1.0 beside a choice read at 0.5."""
    measurements = [
        with_final(row(0, [60.0, 60.0, 60.0], default=True, seeds=[1]), [50.0, 100.0, 100.0]),
        with_final(row(1, [100.0, 100.0, 100.0], grid=True), [100.0, 200.0, 90.0]),
    ]
    figures = judged(measurements, 1)["figures"]
    assert figures["default_vs_grid"] == pytest.approx(0.5)
    assert figures["choices"][0]["vs_grid"] == pytest.approx(0.5)
    assert _generalise_report._default_vs_grid(figures) == "0.500"
    older = {k: v for k, v in figures.items() if k != "default_vs_grid"}
    assert _generalise_report._default_vs_grid(older) == "1.000"  # written before the figure


def test_a_run_without_a_final_set_is_judged_on_its_first_medians() -> None:
    measurements = [
        row(0, [60.0, 60.0, 60.0], default=True),
        row(1, [100.0, 100.0, 100.0], grid=True),
        row(2, [90.0, 90.0, 90.0], grid=True, seeds=[1]),
    ]
    figures = judged(measurements, 1)["figures"]
    assert figures["judged_on"] == "first rounds"
    assert figures["choices"][0]["vs_grid"] == pytest.approx(0.9)
    assert figures["choices"][0]["vs_default"] == pytest.approx(1.5)
    # a final set that missed a choice (a run cut short): still the first medians
    measurements[0] = with_final(measurements[0], [60.0, 60.0, 60.0])
    measurements[1] = with_final(measurements[1], [100.0, 100.0, 100.0])
    assert judged(measurements, 1)["figures"]["judged_on"] == "first rounds"


def test_the_final_set_reads_a_tie_as_a_tie_where_the_first_medians_read_a_loss() -> None:
    """40 grid points that train alike, each round of each point off by up to 25% (the
    spreads seen on 2 shared CPUs) and every round's machine speed off by up to 30%: the
    first set's best median is the highest of 40 noisy medians and reads the choice, one
    of those points, well below it; the final set reads it at about 1."""
    generator = random.Random(14)

    def noisy(rounds: int, speeds: list[float]) -> list[float | None]:
        return [1000.0 * speeds[r] * generator.uniform(0.75, 1.25) for r in range(rounds)]

    first_readings, final_readings = [], []
    for _ in range(30):
        first_speeds = [generator.uniform(0.7, 1.3) for _ in range(3)]
        final_speeds = [generator.uniform(0.7, 1.3) for _ in range(5)]
        grid = [row(w, noisy(3, first_speeds), grid=True) for w in range(40)]
        grid[7]["seeds"] = [1]  # the choice: an average point
        grid.append(row(99, noisy(3, first_speeds), default=True))
        for index in finalists(grid):
            grid[index] = with_final(grid[index], noisy(5, final_speeds))
        (choice,) = judged(grid, 1)["figures"]["choices"]
        first_readings.append(choice["first_vs_grid"])
        final_readings.append(choice["vs_grid"])
    assert statistics.median(first_readings) < 0.85
    assert 0.93 < statistics.median(final_readings) < 1.07


# --------------------------------------------------------------------- judging earlier runs again
def test_rejudge_measures_the_final_set_of_an_earlier_run_and_writes_its_verdicts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    measurements = [
        row(0, [60.0, 60.0, 60.0], default=True),
        row(1, [100.0, 130.0, 100.0], grid=True),
        row(2, [95.0, 95.0, 95.0], grid=True, seeds=[1]),
        row(3, [90.0, 90.0, 90.0], grid=True),
        row(4, [20.0, 20.0, 20.0], grid=True),
    ]
    section = {
        "name": "io-bound",
        "config": "benchmarks/workloads/io_bound.py",
        "device": "cpu",
        "user_batch": 32,
        "cpus": 2,
        "searches": [{**s, "printed": "x", "confirmed": True} for s in searches(1)],
        "grids": [{"batch_size": 32, "amp": "off"}],
        "measurements": measurements,
        "checker": {
            "rounds": 3,
            "seconds": 1.0,
            "warmup": 0.25,
            "measurements": 12,
            "wall_s": 12.0,
            "mean_measurement_s": 1.0,
        },
        "wall_s": 100.0,
    }
    earlier = {
        "mode": "generalise",
        "started": "2026-12-01T10:00:00",
        "host": "vm",
        "commit": "0123456789",
        "dirty": False,
        "machine": MACHINE.to_dict(),
        "options": GeneraliseOptions(seconds=1.0, warmup=0.25).to_dict(),
        "wall_s": 100.0,
        "workloads": [section, {"name": "cpu-decode", "error": "x"}],
    }
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    calls: list[tuple[int, float, float]] = []

    def measure(config: Path, settings: Settings, **options: Any) -> float:
        calls.append((settings.num_workers, options["seconds"], options["warmup"]))
        return {0: 60.0, 1: 100.0, 2: 99.0, 3: 80.0}[settings.num_workers]

    monkeypatch.setattr(_generalise_rounds, "measure", measure)
    monkeypatch.setattr(_generalise_rounds, "time", types.SimpleNamespace(perf_counter=lambda: 0.0))
    out = tmp_path / "again.json"
    argv = ["generalise", "--rejudge", str(path), "--final-rounds", "3", "--out", str(out)]
    assert _cli.main([*argv, "--keep-data"]) == 0
    # the default, the choice and the leaders w=1, w=2, w=3 (w=4 left out), at the earlier
    # run's options
    assert sorted(set(calls)) == [(w, 1.0, 0.25) for w in range(4)]
    assert len(calls) == 4 * 3
    again = json.loads(out.read_text())
    (workload,) = again["workloads"]
    assert workload["figures"]["judged_on"] == "final rounds"
    assert workload["figures"]["choices"][0]["vs_grid"] == pytest.approx(0.99)
    assert workload["checker"]["final_rounds"] == 3
    assert again["rejudged_from"][0]["commit"] == "0123456789"
    assert again["targets"]["median_vs_grid"] == 0.97  # the bounds it was judged by now
    document = out.with_suffix(".md").read_text()
    assert "autotune at 0123456, judged again with a final set of rounds at" in document
    assert "The final set. Those rounds pick the 3 leading grid points" in document
    assert "> Judged again: the searches and the first set of rounds are an earlier run's" in (
        document
    )


def test_rounds_alternate_their_order_and_keep_each_config_s_figures_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert round_order(3, 1) == [0, 1, 2]
    assert round_order(3, 2) == [2, 1, 0]
    assert round_order(3, 3) == [0, 1, 2]
    # A machine that speeds up by 10/s over each measurement: in a fixed order the last
    # config would gain the same in every round.
    clock = iter(range(1000))
    order: list[int] = []

    def measure(config: Path, settings: Settings, **options: Any) -> float:
        order.append(settings.num_workers)
        return 1000.0 * settings.num_workers + 10.0 * next(clock)

    monkeypatch.setattr(_generalise_rounds, "measure", measure)
    configs = [Settings(batch_size=8, num_workers=n, prefetch_factor=2) for n in (1, 2, 3)]
    measured = measure_rounds(Path("x.py"), configs, RoundsOptions(rounds=4), "cpu", lambda _: None)
    assert order == [1, 2, 3, 3, 2, 1, 1, 2, 3, 3, 2, 1]
    assert measured.rates == [
        [1000.0, 1050.0, 1060.0, 1110.0],
        [2010.0, 2040.0, 2070.0, 2100.0],
        [3020.0, 3030.0, 3080.0, 3090.0],
    ]
    # A steady drift gives the last config +20 in one round and -20 in the next: over a
    # pair of rounds it favours neither (in a fixed order, +20 every round).
    first, _, third = measured.rates
    gaps = [c - a for a, c in zip(first, third, strict=True)]
    assert gaps == [2020.0, 1980.0, 2020.0, 1980.0]
