"""The generalisation benchmark (python -m benchmarks generalise) on made-up figures:
its grid, its targets on both sides of every bound, its files, its command line, and
that it reads the searches through autotune's public API only."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import SearchResult, Settings
from autotune.machine._machine import Machine
from autotune.probe import Figures, Window
from autotune.result import SearchTime
from autotune.result._predict import prediction_interval
from autotune.space._space import build_space
from benchmarks import _cli, _page
from benchmarks.common._checker import CheckerError
from benchmarks.common._workloads import find
from benchmarks.generalise import _check as _generalise
from benchmarks.generalise import _cli as _generalise_cli
from benchmarks.generalise import _report as _generalise_report
from benchmarks.generalise import _rounds as _generalise_rounds
from benchmarks.generalise._check import (
    GeneraliseOptions,
    GridSpec,
    grid_points,
    parse_grid,
    plan,
    run_workload,
)
from benchmarks.generalise._peer_report import side_by_side
from benchmarks.generalise._plot import LEFT as LEFT_EDGE
from benchmarks.generalise._plot import svg
from benchmarks.generalise._targets import assess, outside_by, space_size

ROOT = Path(__file__).resolve().parents[2]
MODULES = (
    "generalise._check",
    "generalise._rounds",
    "generalise._targets",
    "generalise._report",
    "generalise._plot",
    "generalise._peer_report",
    "peer._translate",
    "peer._run",
)
MACHINE = Machine(cpus=2, cpu_model="x", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")


# --------------------------------------------------------------------- the grid
def test_the_full_grid_is_workers_by_threads_by_persistence_with_workers() -> None:
    points = grid_points(32, "off", 2, GridSpec())
    expected = {(0, t, False) for t in (1, 2)} | {
        (w, t, p) for w in (1, 2, 4, 8, 16) for t in (1, 2) for p in (False, True)
    }
    assert len(points) == 22
    assert {(s.num_workers, s.threads, s.persistent_workers) for s in points} == expected
    assert {(s.batch_size, s.amp, s.pin_memory) for s in points} == {(32, "off", False)}
    # The DataLoader's default depth, spelt out where workers load.
    assert {(s.num_workers > 0, s.prefetch_factor) for s in points} == {(False, None), (True, 2)}
    # Workers' native threads capped as the search's default space caps them.
    assert {(s.num_workers > 0, s.worker_threads) for s in points} == {(False, None), (True, 1)}
    assert len(grid_points(64, "bf16", 1, GridSpec())) == 11  # one CPU: one thread count


def test_a_grid_narrows_by_name_or_by_json() -> None:
    assert parse_grid(None) == parse_grid("full") == GridSpec()
    small = grid_points(32, "off", 2, parse_grid("small"))
    assert [(s.num_workers, s.threads, s.persistent_workers) for s in small] == [
        (0, 1, False),
        (0, 2, False),
        (2, 1, True),
        (2, 2, True),
    ]
    spec = parse_grid('{"num_workers": [0, 4, 4], "threads": "all", "persistent_workers": false}')
    assert spec == GridSpec(workers=(0, 4), threads=("all",), persistent=(False,))
    assert len(grid_points(32, "off", 8, spec)) == 2
    both = parse_grid('{"num_workers": [0, 2], "threads": [1], "worker_threads": [1, null]}')
    assert [(s.num_workers, s.worker_threads) for s in grid_points(32, "off", 2, both)] == [
        (0, None),
        (2, 1),
        (2, None),
        (2, 1),
        (2, None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tiny", "expected full or small"),
        ("[0, 2]", "expected full or small"),
        ('{"prefetch_factor": 4}', "unknown knobs ['prefetch_factor']"),
        ('{"num_workers": [-1, 2]}', "num_workers has [-1]; expected integers >= 0"),
        ('{"threads": [0]}', "threads has [0]"),
        ('{"persistent_workers": ["yes"]}', "expected true or false"),
        ('{"worker_threads": [0]}', "worker_threads has [0]; expected integers >= 1 or null"),
        ('{"num_workers": []}', "num_workers is empty"),
    ],
)
def test_a_wrong_grid_says_what_was_given(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_grid(text)


def test_the_plan_adds_a_grid_per_other_chosen_batch_and_amp_and_measures_each_config_once() -> (
    None
):
    # As a search chooses it, prefetch_factor spelt out at the DataLoader's default.
    on_grid = CHOICES[1]
    other = Settings(batch_size=64, num_workers=4, prefetch_factor=4, amp="bf16", threads=2)
    choices = [(1, on_grid), (2, other), (3, on_grid)]
    grids, planned = plan(32, choices, 2, GridSpec())
    assert grids == [(32, "off"), (64, "bf16")]
    assert len(planned) == 1 + 1 + 22 * 2  # the default, the off-grid choice, two grids
    assert planned[0].settings == Settings(batch_size=32) and planned[0].default
    shared = next(p for p in planned if p.settings == on_grid)
    assert shared.seeds == (1, 3) and shared.grid
    assert [p.seeds for p in planned if p.settings == other] == [(2,)]
    assert len({p.settings.key() for p in planned}) == len(planned)


@pytest.mark.parametrize(
    "space",
    [
        {},
        {"num_workers": [0, 2, 4], "prefetch_factor": 2},
        {"num_workers": 0, "batch_size": [16, 32, 64], "threads": 1},
        {"num_workers": {"low": 1, "high": 3}, "persistent_workers": True},
    ],
)
def test_the_space_size_read_from_a_result_is_the_spaces_own(space: dict[str, Any]) -> None:
    built = build_space(space, MACHINE, 32)
    assert space_size(built.to_dict()) == built.size()


# --------------------------------------------------------------------- the targets
def measurements(grid: Sequence[float], default: float, choices: dict[int, float]) -> list[Any]:
    """Made-up checker medians: grid points, the default loader, each seed's choice."""
    rows = [
        {"settings": {"w": i}, "describe": f"w={i}", "median": m, "grid": True}
        for i, m in enumerate(grid)
    ]
    rows.append({"settings": {"d": 0}, "describe": "default", "median": default, "default": True})
    rows += [
        {"settings": {"s": s}, "describe": f"s{s}", "median": m, "seeds": [s]}
        for s, m in choices.items()
    ]
    return [{"default": False, "grid": False, "seeds": [], "spread": 0.0, **r} for r in rows]


def searches(**changes: Any) -> list[dict[str, Any]]:
    base = {
        "describe": "x",
        "is_default": False,
        "interval": [90.0, 110.0],
        "speedup_interval": [1.8, 2.2],
        "wall_s": 100.0,
        "space_size": 500,
    }
    return [{**base, "seed": s, **changes.get(str(s), {})} for s in (1, 2, 3)]


def verdicts(choices: dict[int, float], default: float = 50.0, **changes: Any) -> list[bool]:
    # 500 configs x 3 rounds x 2 s = 3,000 s of space cost: 100 s of search is 0.033.
    judged = assess(
        measurements([100.0, 80.0], default, choices),
        searches(**changes),
        rounds=3,
        measurement_s=2.0,
    )
    return [v["passed"] for v in judged["verdicts"]]


def test_choices_at_the_bounds_pass_and_just_below_fail() -> None:
    assert verdicts({1: 100.0, 2: 97.0, 3: 93.0}) == [True] * 5
    median, worst, *_ = verdicts({1: 100.0, 2: 96.9, 3: 93.0})
    assert (median, worst) == (False, True)
    median, worst, *_ = verdicts({1: 100.0, 2: 97.0, 3: 92.9})
    assert (median, worst) == (True, False)


def test_a_choice_below_the_default_fails_unless_it_is_the_default() -> None:
    choices = {1: 100.0, 2: 100.0, 3: 98.0}
    assert verdicts(choices, default=100.0)[2]  # 0.98 x the default
    assert not verdicts(choices, default=100.1)[2]
    assert verdicts(choices, default=100.1, **{"3": {"is_default": True}})[2]


def test_the_default_chosen_is_the_grid_best_where_the_grid_best_is_its_twin() -> None:
    # small-in-ram at b4d67da: every search chose the default, the grid best was the
    # default's twin (workers=0 batch=32 threads=2), and the two read 0.957 apart.
    rows = measurements([100.0, 80.0], 95.7, {})
    rows[0]["settings"] = {"batch_size": 32, "num_workers": 0, "threads": 2}
    default = next(r for r in rows if r["default"])
    default["settings"] = {"batch_size": 32, "num_workers": 0, "threads": None}
    default["seeds"] = [1, 2, 3]
    rows[0]["rounds"], default["rounds"] = [100.0] * 3, [95.7] * 3

    def judged(cpus: int | None) -> dict[str, Any]:
        chose_default = searches(**{str(s): {"is_default": True} for s in (1, 2, 3)})
        return assess(rows, chose_default, rounds=3, measurement_s=2.0, cpus=cpus)

    twin_best = judged(cpus=2)
    choices = twin_best["figures"]["choices"]
    assert [c["vs_grid"] for c in choices] == [1.0] * 3
    assert [c["vs_grid_measured"] for c in choices] == pytest.approx([0.957] * 3)
    assert twin_best["verdicts"][0]["passed"]
    assert "the grid best's twin; 0.957 as measured" in twin_best["verdicts"][0]["detail"]
    # The twin not the grid best: the default is read by its own measurements.
    rows[1]["median"] = 120.0
    choices = judged(cpus=2)["figures"]["choices"]
    assert [c["vs_grid"] for c in choices] == pytest.approx([95.7 / 120.0] * 3)
    assert not any(c["is_grid_best"] for c in choices)
    # Without the CPUs, no twin is found, and nothing is read as the grid best.
    rows[1]["median"] = 80.0
    choices = judged(cpus=None)["figures"]["choices"]
    assert [c["vs_grid"] for c in choices] == pytest.approx([0.957] * 3)


def test_the_search_costs_at_most_a_tenth_of_measuring_its_space() -> None:
    choices = {1: 100.0, 2: 100.0, 3: 100.0}
    assert verdicts(choices, **{"2": {"wall_s": 300.0}})[3]  # 300 s of 3,000
    assert not verdicts(choices, **{"2": {"wall_s": 300.3}})[3]
    assert not verdicts(choices, **{"2": {"space_size": 499, "wall_s": 300.0}})[3]


def test_each_choice_must_lie_in_the_interval_autotune_printed() -> None:
    inside = {1: 100.0, 2: 100.0, 3: 100.0}
    assert verdicts(inside, **{"1": {"interval": [100.0, 100.0]}})[4]
    assert not verdicts(inside, **{"1": {"interval": [100.1, 120.0]}})[4]
    assert not verdicts(inside, **{"1": {"interval": [80.0, 99.9]}})[4]
    assert not verdicts(inside, **{"1": {"interval": None}})[4]  # no interval printed
    assert outside_by(90.0, [100.0, 120.0]) == pytest.approx(-0.1)
    assert outside_by(132.0, [100.0, 120.0]) == pytest.approx(0.1)


def test_the_figures_name_the_grid_best_and_the_spread_of_the_choices() -> None:
    judged = assess(
        measurements([80.0, 100.0], 50.0, {1: 95.0, 2: 102.0, 3: 90.0}),
        searches(),
        rounds=3,
        measurement_s=2.0,
    )
    figures = judged["figures"]
    assert figures["grid_best"]["describe"] == "w=1" and figures["grid_points"] == 2
    assert figures["spread"] == {"low": pytest.approx(0.90), "high": pytest.approx(1.02)}
    assert [c["vs_default"] for c in figures["choices"]] == pytest.approx([1.9, 2.04, 1.8])
    assert [c["space_cost_s"] for c in figures["choices"]] == [3000.0] * 3
    assert figures["grid_cost_s"] == 2 * 3 * 2.0  # for scale: the grid alone, not judged
    assert figures["search_vs_grid"] == pytest.approx([100 / 12] * 3)
    assert [c["speedup_inside"] for c in figures["choices"]] == [True, True, True]
    detail = judged["verdicts"][4]["detail"]
    assert detail == "seed 1 inside, seed 2 inside, seed 3 inside"


# --------------------------------------------------------------------- a workload, end to end
def result(settings: Settings, rates: tuple[float, ...], **changes: Any) -> SearchResult:
    """A search's result as autotune returns it, with made-up figures."""
    middle = sorted(rates)[len(rates) // 2]
    window = Window(
        index=0, seconds=1.0, samples=round(middle), fresh=round(middle), steps=1, wait_seconds=0.0
    )
    fields: dict[str, Any] = {
        "settings": settings,
        "figures": Figures(windows=(window,)),
        "device": "cpu",
        "machine": MACHINE,
        "rates": rates,
        "speedup_rounds": tuple(r / 100 for r in rates),
        "rounds": len(rates),
        "user_batch_size": 32,
        "space": build_space({}, MACHINE, 32).to_dict(),
    }
    return SearchResult(**{**fields, **changes})


CHOICES = {  # as the default space caps the workers' native threads
    1: Settings(
        batch_size=32,
        num_workers=2,
        prefetch_factor=2,
        persistent_workers=True,
        threads=1,
        worker_threads=1,
    ),
    2: Settings(batch_size=64, num_workers=2, prefetch_factor=4, threads=1, worker_threads=1),
    3: Settings(batch_size=32),
}


def checker_figure(settings: Settings) -> float:
    """Made-up plain-loop figures: workers pay up to 2, one thread beats two."""
    rate = 100.0 + 100 * min(settings.num_workers, 2) + (20 if settings.threads == 1 else 0)
    return rate * (1.1 if settings.batch_size == 64 else 1.0)


SEARCH_TIMES = {  # each seed's search by stage: seed 2 ran a runoff, seed 3 no worker sweep
    1: SearchTime(
        total_s=250.0,
        stages=(("preflight", 1.0), ("bounds", 70.0), ("workers", 4.0), ("explore", 80.0),
                ("confirm", 90.0)),
    ),
    2: SearchTime(
        total_s=200.0,
        stages=(("preflight", 1.0), ("bounds", 60.0), ("workers", 2.0), ("explore", 70.0),
                ("confirm", 60.0), ("runoff", 6.0)),
    ),
    3: SearchTime(
        total_s=150.0,
        stages=(("preflight", 2.0), ("bounds", 50.0), ("explore", 60.0), ("confirm", 36.0)),
    ),
}  # fmt: skip


PEER_CHOICE = Settings(batch_size=32, num_workers=2, persistent_workers=True)
"""The peer's (made-up) choice: two persistent workers, its threads and theirs left as is."""


def peer_record(config: Path, *, user_batch: int, device: str, say: Any) -> dict[str, Any]:
    """What ``run_peer`` records, made up: loadtune chose two persistent workers in 2.6 s."""
    assert (config.name, user_batch, device) == ("compute_bound.py", 32, "cpu")
    return {
        "tool": "loadtune",
        "version": "0.3.0",
        "wall_s": 2.6,
        "process_s": 9.5,
        "settings": PEER_CHOICE.to_dict(),
        "describe": PEER_CHOICE.describe(),
        "changed": True,
        "notes": ["compile=True (torch.compile): not a knob the checker has; measured without"],
        "error": None,
        "answer": {"speedup": 1.4},
        "log": [],
    }


def run_fake_workload(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, peer: bool = False, peer_budget: bool = False
) -> dict[str, Any]:
    searched: list[dict[str, Any]] = []

    def search(config: Path, **options: Any) -> SearchResult:
        searched.append(options)
        seed = options["seed"]
        took = SEARCH_TIMES[seed]
        if seed == 3:
            return result(CHOICES[3], (95.0, 100.0, 105.0), is_default=True, search_time=took)
        # seed 2's rounds agree closely: the checker's 352 lies above its interval
        rates = (300.0, 320.0, 340.0) if seed == 1 else (318.0, 320.0, 322.0)
        return result(CHOICES[seed], rates, search_time=took)

    calls: list[Settings] = []

    def measure(config: Path, settings: Settings, **options: Any) -> float:
        calls.append(settings)
        if settings.num_workers == 16 and len(calls) < 60:  # round 1: one fails
            raise CheckerError("worker died")
        return checker_figure(settings)

    ticks = itertools.count()  # each measurement takes one second of this clock
    monkeypatch.setattr(autotune, "search", search)
    monkeypatch.setattr(_generalise_rounds, "measure", measure)
    monkeypatch.setattr(
        _generalise_rounds, "time", types.SimpleNamespace(perf_counter=ticks.__next__)
    )
    monkeypatch.setattr(_generalise, "run_peer", peer_record)
    options = GeneraliseOptions(
        rounds=3, final_rounds=5, trials=4, study_dir=tmp_path, peer=peer, peer_budget=peer_budget
    )
    section = run_workload(find(["compute-bound"])[0], options, MACHINE, lambda line: None)
    # The search at the peer's time is seed 1's again, given the peer's 2.6 s: it chooses
    # seed 1's config, measured once for both.
    assert [s["seed"] for s in searched] == [1, 2, 3] + [1] * peer_budget
    assert {s["trials"] for s in searched} == {4}
    assert [s.get("budget") for s in searched][3:] == [2.6] * peer_budget
    first = 3 * (2 + peer + 22 * 2)  # the default (seed 3's too), seed 2's, two grids
    # then the final set: the default, seed 1's (a grid point) and seed 2's choices, the
    # 3 leading grid points and the default's twin (workers=0 batch=32 threads=2), in 5 rounds
    final = 7 + peer  # and the peer's choice, where it ran
    assert len(calls) == first + 5 * final
    assert {s.key() for s in calls[first : first + final]} == {s.key() for s in calls[-final:]}
    assert (PEER_CHOICE.key() in {s.key() for s in calls[-final:]}) == peer
    assert Settings(batch_size=32, threads=2).key() in {s.key() for s in calls[-final:]}
    return section


def test_a_workload_is_searched_three_times_then_judged_by_the_plain_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = run_fake_workload(monkeypatch, tmp_path)
    json.dumps(section)  # JSON types only
    assert section["grids"] == [{"batch_size": 32, "amp": "off"}, {"batch_size": 64, "amp": "off"}]
    figures = section["figures"]
    assert (
        figures["grid_best"]["describe"]
        == "workers=2 prefetch=2 persistent=no batch=64 threads=1 worker_threads=1"
    )
    assert figures["grid_best"]["samples_per_s"] == pytest.approx(352.0)
    assert [c["vs_grid"] for c in figures["choices"]] == pytest.approx(
        [320 / 352, 352 / 352, 100 / 352]
    )
    # the checker set against itself: the default and the same config named in the grid
    assert figures["twin"] == {
        "describe": "workers=0 batch=32 threads=2",
        "judged_on": "final rounds",
        "rounds": 5,
        "ratio": 1.0,
    }
    failed = [m for m in section["measurements"] if m["errors"]]
    assert failed and all(len(m["rounds"]) == 3 and None in m["rounds"] for m in failed)
    assert section["searches"][0]["space_size"] == build_space({}, MACHINE, 32).size()
    # what the search printed: the 95% prediction interval of its rounds
    assert section["searches"][0]["rates"] == [300.0, 320.0, 340.0]
    assert section["searches"][0]["interval"] == pytest.approx(
        list(prediction_interval([300.0, 320.0, 340.0]) or ())
    )
    passed = {v["target"].split(" ")[0]: v["passed"] for v in section["verdicts"]}
    assert passed == {
        "median": False,
        "worst": False,
        "every": True,
        "search": True,
        "choice": False,
    }
    assert section["checker"]["mean_measurement_s"] == 1.0
    # Each search's time by stage, as the search's own clock kept it.
    assert [SearchTime.from_dict(s["search_time"]) for s in section["searches"]] == list(
        SEARCH_TIMES.values()
    )
    assert figures["choices"][0]["space_cost_s"] == 390 * 3 * 1.0


def test_the_markdown_and_the_plot_show_every_choice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = run_fake_workload(monkeypatch, tmp_path)
    table = _generalise_report.markdown(section)
    assert (
        "| grid best | workers=2 prefetch=2 persistent=no batch=64 threads=1 worker_threads=1 "
        "| 352 (±0%) | 1.000 |" in table
    )
    assert (
        "| seed 3 (the default) | workers=0 batch=32 | 100 (±0%) | 0.284 | 0.284 | 0.284 | 1.00 |"
        in table
    )
    assert "| 100 samples/s (95% prediction 77.9-128, 3 rounds) | yes | 0 | 0.000 |" in table
    assert (
        "| 320 samples/s (95% prediction 310-330, 3 rounds), 3.20x (95% prediction 3.10-3.30, "
        "3 rounds) | no, 6.6% above; speedup outside |" in table
    )
    assert (
        "| seed 1 | workers=2 prefetch=2 persistent=yes batch=32 threads=1 worker_threads=1 "
        "| 320 (±0%) | 0.909 |" in table
    )
    assert "- FAIL  worst choice >= 0.93 x grid best: 0.284 (bound 0.93)" in table
    assert (
        "The checker against itself: the default loader over its twin in the grid "
        "(workers=0 batch=32 threads=2, the same config), within each of the 5 final rounds: "
        "1.000." in table
    )
    assert "seed 1 inside, seed 2 6.6% above, seed 3 inside" in table
    broken = {"name": "io-bound", "error": "WorkloadError: no data"}
    results = {
        "mode": "generalise",
        "started": "2026-12-01T10:00:00",
        "host": "vm",
        "commit": "0123456789",
        "dirty": False,
        "machine": MACHINE.to_dict(),
        "options": GeneraliseOptions().to_dict(),
        "wall_s": 600.0,
        "workloads": [section, broken],
    }
    json_path, md_path, svg_path = _generalise_report.write(results, tmp_path / "g.json")
    document = md_path.read_text()
    assert (
        "| compute-bound | FAIL 0.909 | FAIL 0.284 | PASS 3.20 | PASS 0.000 | FAIL 2/3 "
        "| 0.284-1.000 | 1.000 (5 final rounds) |" in document
    )
    assert (
        "| io-bound | FAILED |" in document and "![each choice against the grid](g.svg)" in document
    )
    # The mean search by stage beside the median choice: a stage a search skipped counts
    # 0 s; the workload that failed has no row.
    times = document.split("Search time by stage")[1].split("### compute-bound")[0]
    assert (
        "| workload | median choice × grid best | search s | preflight | bounds | workers "
        "| explore | confirm | runoff |" in times
    )
    assert "| compute-bound | 0.909 | 200 | 1.3 | 60 | 2.0 | 70 | 62 | 2.0 |" in times
    assert "io-bound" not in times
    # The results page prints the same table from the results file.
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "generalise-2026-12-01-1000.json").write_text(json_path.read_text())
    page = _page.render(tmp_path / "results", tmp_path)
    assert "| compute-bound | 0.909 | 200 | 1.3 | 60 | 2.0 | 70 | 62 | 2.0 |" in page
    tree = ET.fromstring(svg_path.read_text())
    marks = [e for e in tree.iter() if e.get("class") == "choice"]
    assert len(marks) == 3 and len([e for e in tree.iter() if e.get("class") == "grid"]) == 44
    assert json.loads(json_path.read_text())["workloads"][1] == broken

    stale = dict(section, name="io-bound", verdicts=[], figures={})  # from an older version
    # Run first, though given last: the merged run started when it did.
    again = dict(results, workloads=[stale], commit="abcdef0", started="2026-11-30T09:00:00")
    (tmp_path / "h.json").write_text(json.dumps(again))
    merged = _generalise_report.merge([json_path, tmp_path / "h.json"])
    assert merged["started"] == "2026-11-30T09:00:00"
    assert [s["name"] for s in merged["workloads"]] == ["compute-bound", "io-bound"]
    assert "error" not in merged["workloads"][1]  # the later run's io-bound, judged again
    assert merged["workloads"][1]["verdicts"] == section["verdicts"]
    assert [m["commit"] for m in merged["merged_from"]] == ["0123456789", "abcdef0"]
    assert "0123456, abcdef0" in _generalise_report.document(merged, "m.json", "m.svg")


def test_the_peer_is_measured_in_the_same_rounds_and_shown_beside_autotune(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = run_fake_workload(monkeypatch, tmp_path, peer=True)
    (measured,) = [m for m in section["measurements"] if m["peer"]]
    assert measured["settings"] == PEER_CHOICE.to_dict() and not measured["grid"]
    assert len(measured["rounds"]) == 3 and len(measured["final"]) == 5
    peer = section["figures"]["peer"]
    assert peer["vs_grid"] == pytest.approx(300 / 352) and peer["vs_default"] == 3.0
    assert section["peer"]["wall_s"] == 2.6 and not peer["is_default"]
    # The verdicts are autotune's alone: the same as without the peer (but the search time,
    # which this clock took).
    alone = run_fake_workload(monkeypatch, tmp_path / "alone")

    def judged(verdicts: list[dict[str, Any]]) -> list[Any]:
        return [(v["passed"], v["figure"]) for v in verdicts if "search" not in v["target"]]

    assert judged(section["verdicts"]) == judged(alone["verdicts"])
    assert "peer" not in alone["figures"]
    table = _generalise_report.markdown(section)
    assert (
        "| peer (loadtune) | workers=2 prefetch=2 persistent=yes batch=32 | 300 (±0%) | 0.852 "
        "| 0.852 | - | 3.00 | 1.40x its baseline | - | 2.6 | - |" in table
    )
    assert (
        "The peer: loadtune 0.3.0 with its own defaults (a baseline and up to 6 trials of 100 "
        "steps), run once: 2.6 s for its `tune` call (9.5 s with its process starting). Notes: "
        "compile=True (torch.compile): not a knob the checker has; measured without." in table
    )
    results = {
        "mode": "generalise",
        "started": "2026-12-01T10:00:00",
        "host": "vm",
        "machine": MACHINE.to_dict(),
        "options": GeneraliseOptions(peer=True).to_dict(),
        "workloads": [section, dict(alone, name="io-bound")],
    }
    json_path, md_path, _ = _generalise_report.write(results, tmp_path / "g.json")
    document = md_path.read_text()
    assert "The peer. loadtune, the tuner a user would pick instead" in document
    # Side by side: autotune's median choice, its median over the default and its mean
    # search (its own clock); the peer's choice, its ratios and its seconds. The workload
    # measured without the peer has no row.
    row = (
        "| compute-bound | 0.909 | 3.20 | 200 | workers=2 prefetch=2 persistent=yes batch=32 "
        "| 0.852 | 3.00 | 2.6 |"
    )
    assert row in document and "| io-bound | 0.909 | 3.20 |" not in document
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "generalise-2026-12-01-1000.json").write_text(json_path.read_text())
    assert row in _page.render(tmp_path / "results", tmp_path)
    # A run without the peer prints none of it.
    results["workloads"] = [alone]
    results["options"] = GeneraliseOptions().to_dict()
    plain = _generalise_report.document(results, "g.json", "g.svg")
    assert "peer" not in plain and "loadtune" not in plain


def test_a_search_given_the_peers_time_is_measured_beside_the_peer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = run_fake_workload(monkeypatch, tmp_path, peer=True, peer_budget=True)
    assert section["budgeted"]["budget_s"] == 2.6 and section["budgeted"]["seed"] == 1
    (measured,) = [m for m in section["measurements"] if m["budgeted"]]
    assert measured["seeds"] == [1] and len(measured["final"]) == 5
    budgeted = section["figures"]["budgeted"]
    assert budgeted["describe"] == CHOICES[1].describe()
    assert budgeted["vs_grid"] == pytest.approx(320 / 352)
    assert budgeted["vs_peer"] == pytest.approx(320 / 300)
    table = _generalise_report.markdown(section)
    assert f"| at the peer's 2.6 s | {CHOICES[1].describe()} | 320 (±0%) | 0.909 " in table
    side = side_by_side([section])
    assert side[3].endswith("| at the peer's time: choice × grid best | × the peer's | search s |")
    assert side[5].endswith("| 2.6 | 0.909 | 1.07 | 250 |")  # seed 1's search time, made up


def test_an_earlier_run_gets_a_search_at_the_peers_time_and_its_final_rounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    section = run_fake_workload(monkeypatch, tmp_path, peer=True)
    one = Settings(batch_size=32, num_workers=1, threads=1, worker_threads=1)
    given: list[dict[str, Any]] = []

    def search(config: Path, **options: Any) -> SearchResult:
        given.append(options)
        return result(one, (200.0, 210.0, 220.0))

    monkeypatch.setattr(autotune, "search", search)
    options = GeneraliseOptions(final_rounds=5, study_dir=tmp_path)
    workload = find(["compute-bound"])[0]
    added = _generalise.add_budgeted(section, workload, options, MACHINE, lambda line: None)
    assert given[0]["budget"] == 2.6 and given[0]["seed"] == 1
    (new,) = [m for m in added["measurements"] if m.get("budgeted")]
    assert new["settings"] == one.to_dict() and new["rounds"] == [] and not new["grid"]
    assert "budgeted" not in section  # the earlier section is left as it was
    judged = _generalise.judge_again(added, workload.config, options, lambda line: None)
    (measured,) = [m for m in judged["measurements"] if m.get("budgeted")]
    assert len(measured["final"]) == 5  # the final set took it
    assert judged["figures"]["budgeted"]["vs_peer"] == pytest.approx(220 / 300)
    # A section without the peer is left as it was, and nothing is searched.
    plain = run_fake_workload(monkeypatch, tmp_path / "plain")
    assert _generalise.add_budgeted(plain, workload, options, MACHINE, lambda line: None) == plain
    assert len(given) == 1


def test_the_plot_is_well_formed_with_one_mark_per_choice_even_for_odd_names() -> None:
    judged = assess(
        measurements([100.0, 80.0], 50.0, {1: 97.0, 2: 130.0}),
        searches(),
        rounds=3,
        measurement_s=2.0,
    )
    section = {
        "name": "a<b & c",
        "measurements": measurements([100.0, 80.0], 50.0, {1: 97.0, 2: 130.0}),
        **judged,
    }
    tree = ET.fromstring(svg([section, {"name": "broken", "error": "x"}]))
    assert len([e for e in tree.iter() if e.get("class") == "choice"]) == 3
    assert any(e.text == "a<b & c" for e in tree.iter())


def test_the_plot_reads_each_grid_point_against_the_best_of_its_own_rounds() -> None:
    # The first set read the grid in a faster state of the machine than the final rounds
    # that grade the choices: its points lie at their share of the first set's best, as in
    # the grid table, not over a figure from other rounds (which put them past the best).
    section = {
        "name": "w",
        "measurements": [{"grid": True, "median": 200.0}, {"grid": True, "median": 150.0}],
        "figures": {
            "grid_best": {"samples_per_s": 100.0},
            "first_grid_best": {"samples_per_s": 200.0},
            "default_samples_per_s": 50.0,
            "default_vs_grid": 0.5,
            "choices": [{"seed": 1, "describe": "x", "vs_grid": 0.98}],
        },
    }
    tree = ET.fromstring(svg([section]))
    best_line = next(e for e in tree.iter() if e.get("class") == "bound")
    points = sorted(float(e.get("cx", 0)) for e in tree.iter() if e.get("class") == "grid")
    one, left = float(best_line.get("x1", 0)), LEFT_EDGE
    assert points[-1] == pytest.approx(one, abs=0.1)  # the SVG writes tenths of a pixel
    assert points[0] == pytest.approx(left + 0.75 * (one - left), abs=0.1)


# --------------------------------------------------------------------- the command line
@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "2"],  # a flag without a suite
        ["suite", "--grid", "small"],
        ["generalise", "--rounds", "2"],  # fewer than the 3 rounds a judgement needs
        ["generalise", "--seeds", "0"],
        ["generalise", "--trials", "0"],
        ["generalise", "--seconds", "0"],
        ["generalise", "--warmup", "-1"],
        ["generalise", "--grid", "tiny"],
        ["generalise", "--grid", '{"num_workers": [-1]}'],
        ["generalise", "--quick"],
        ["generalise", "--no-summary"],
        ["generalise", "agreement"],  # two suites
        ["generalise", "--workloads", "tape-drive"],
        ["generalise", "--merge", "no-such-results.json"],
        ["generalise", "--rejudge", "no-such-results.json"],
        ["generalise", "--merge", "README.md"],  # not JSON
        ["generalise", "--rejudge", "pyproject.toml"],
        ["generalise", "--merge", "README.md", "--rejudge", "README.md"],
        ["generalise", "--peer", "--merge", "README.md"],  # it searches nothing
        ["generalise", "--peer", "--rejudge", "README.md"],
        ["generalise", "--peer-budget"],  # the peer's time, without the peer
        ["generalise", "--final-rounds", "2"],
        ["agreement", "--final-rounds", "5"],  # a flag of another suite
        ["agreement", "--rejudge", "results.json"],
        ["generalise", "--epoch-scale", "2"],  # the online comparison's
        ["online", "--seeds", "2"],
        ["agreement", "--merge", "results.json"],
        ["online", "--grid", "small"],  # a grid by name is this mode's
    ],
)
def test_the_command_line_refuses_what_does_not_apply(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("python -m benchmarks: ")


def test_the_peer_without_loadtune_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_generalise_cli, "peer_installed", lambda: False)
    assert _cli.main(["generalise", "--peer", "--workloads", "io-bound"]) == 2
    assert capsys.readouterr().err == (
        "python -m benchmarks: --peer needs loadtune, which is not installed; "
        "pip install -e '.[bench-peer]'.\n"
    )


def test_a_run_writes_its_files_after_every_workload_named_to_the_minute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[GeneraliseOptions] = []

    def failing(workload: Any, options: GeneraliseOptions, *rest: Any) -> dict[str, Any]:
        seen.append(options)
        raise RuntimeError("no figures today")

    monkeypatch.setattr(_generalise, "run_workload", failing)
    argv = ["generalise", "--workloads", "io-bound", "--grid", "small", "--seeds", "1"]
    assert _cli.main([*argv, "--out", str(tmp_path), "--keep-data"]) == 1  # it failed
    assert seen == [GeneraliseOptions(seeds=1, grid=parse_grid("small"))]
    (written,) = tmp_path.glob("generalise-*.json")
    assert len(written.stem) == len("generalise-2026-12-01-1000")
    assert written.with_suffix(".md").exists() and written.with_suffix(".svg").exists()
    results = json.loads(written.read_text())
    assert results["mode"] == "generalise" and results["options"]["seeds"] == 1
    assert results["targets"]["median_vs_grid"] == 0.97
    assert results["workloads"] == [{"name": "io-bound", "error": "RuntimeError: no figures today"}]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], GeneraliseOptions(grid=parse_grid(None))),  # every default is the options'
        (
            ["--seeds", "2", "--rounds", "4", "--final-rounds", "6", "--warmup", "0"],
            GeneraliseOptions(seeds=2, rounds=4, final_rounds=6, warmup=0.0),
        ),
        (
            ["--seconds", "2", "--trials", "7", "--seed", "5", "--study-dir", "s"],
            GeneraliseOptions(seconds=2.0, trials=7, plain_seed=5, study_dir=Path("s")),
        ),
        (["--peer"], GeneraliseOptions(peer=True)),
        (["--peer", "--peer-budget"], GeneraliseOptions(peer=True, peer_budget=True)),
    ],
)
def test_the_options_take_what_is_given_and_their_own_defaults_for_the_rest(
    flags: list[str], expected: GeneraliseOptions
) -> None:
    args = _cli.parser().parse_args(["generalise", *flags])
    assert _generalise_cli.options(args) == expected


def test_merge_writes_one_set_of_files(tmp_path: Path) -> None:
    run = {
        "mode": "generalise",
        "started": "2026-12-01T10:00:00",
        "host": "vm",
        "machine": MACHINE.to_dict(),
        "options": GeneraliseOptions().to_dict(),
        "workloads": [{"name": "io-bound", "error": "x"}],
    }
    (tmp_path / "a.json").write_text(json.dumps(run))
    out = tmp_path / "all.json"
    assert _cli.main(["generalise", "--merge", str(tmp_path / "a.json"), "--out", str(out)]) == 0
    assert out.exists() and out.with_suffix(".md").exists() and out.with_suffix(".svg").exists()


def test_a_merge_of_runs_on_several_machines_names_each_and_the_dates(tmp_path: Path) -> None:
    def run(started: str, machine: Machine, name: str) -> Path:
        data = {
            "mode": "generalise",
            "started": started,
            "host": "vm",
            "commit": "0123456789",
            "machine": machine.to_dict(),
            "options": GeneraliseOptions().to_dict(),
            "workloads": [{"name": name, "error": "x"}],
        }
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        return path

    amd = Machine(cpus=2, cpu_model="AMD", memory_bytes=2**30, shm_bytes=None, accelerator="cpu")
    with_bf16 = dataclasses.replace(amd, cpu_bf16=True)
    intel = dataclasses.replace(with_bf16, cpu_model="Intel")
    paths = [
        run("2026-11-28T22:28:00", with_bf16, "a"),
        run("2026-11-29T09:48:00", amd, "b"),
        run("2026-11-29T10:33:00", amd, "c"),
        run("2026-12-01T18:15:00", intel, "d"),
    ]
    merged = _generalise_report.merge(paths)
    assert [m["machine"]["cpu_model"] for m in merged["merged_from"]] == [
        "AMD",
        "AMD",
        "AMD",
        "Intel",
    ]
    header = _generalise_report.document(merged, "m.json", "m.svg").splitlines()[2]
    assert header.startswith(
        "2026-11-28 to 2026-12-01, vm: 2 CPUs, no GPU, on 3 machines (AMD with bf16: a; "
        "AMD without bf16: b, c; Intel with bf16: d); torch ?, autotune at 0123456;"
    )
    # One machine: named once, as for a single run.
    alone = _generalise_report.merge(paths[1:3])
    header = _generalise_report.document(alone, "m.json", "m.svg").splitlines()[2]
    assert header.startswith("2026-11-29, vm: 2 CPUs (AMD), no GPU; torch ?")


# --------------------------------------------------------------------- what it imports
def test_the_generalise_modules_load_nothing_of_the_probe_or_the_search() -> None:
    code = (
        "import sys; "
        + "; ".join(f"import benchmarks.{m}" for m in (*MODULES, "generalise._cli"))
        + "; print(sorted(m for m in sys.modules if m.startswith('autotune')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = eval(done.stdout)
    forbidden = ("autotune.probe", "autotune.explore", "autotune.pipeline", "autotune.decide")
    assert "autotune.settings._settings" in loaded
    assert [m for m in loaded if m.startswith((*forbidden, "autotune.result"))] == []


def test_the_generalise_modules_import_only_autotunes_public_names() -> None:
    """Run time aside, the source itself: ``autotune.search`` and the public names, the
    settings' own module (for a type), nothing of the search's internals."""
    for name in MODULES:
        tree = ast.parse((ROOT / "benchmarks" / f"{name.replace('.', '/')}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune"):
                assert node.module in ("autotune", "autotune.settings._settings"), name
                if node.module == "autotune":
                    assert {a.name for a in node.names} <= set(autotune.__all__), name
            if isinstance(node, ast.Import):
                assert all(a.name in ("autotune",) or "autotune" not in a.name for a in node.names)


def test_a_run_that_departs_from_the_protocol_says_so() -> None:
    assert _generalise_report.departures(GeneraliseOptions().to_dict()) == []
    short = GeneraliseOptions(seeds=1, trials=4, grid=parse_grid("small")).to_dict()
    assert _generalise_report.departures(short) == [
        "1 search(es) per workload, not 3",
        "4 exploration trials, not the default budget",
        "a narrowed grid",
    ]
    results = {
        "started": "2026-12-01T10:00:00",
        "host": "vm",
        "machine": MACHINE.to_dict(),
        "options": short,
        "workloads": [],
    }
    document = _generalise_report.document(results, "g.json", "g.svg")
    assert "> Not the benchmark's protocol: 1 search(es) per workload, not 3;" in document
    assert (
        "(num_workers 0, 2\n× training threads 1, every CPU × persistent_workers\nyes," in document
    )
