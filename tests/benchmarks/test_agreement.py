"""The agreement check (python -m benchmarks agreement) on made-up figures: the
verdict, the default loader's rounds, the section and table, the command line."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import Settings
from autotune.result import SearchTime
from benchmarks import _cli
from benchmarks.agreement import _check as _agreement
from benchmarks.agreement import _side_by_side
from benchmarks.agreement._check import ProbeSide, baseline_rounds, markdown, verdict
from benchmarks.common._workloads import find

DEFAULT = Settings(batch_size=64)
CHOSEN = Settings(batch_size=64, num_workers=2, prefetch_factor=2, persistent_workers=True)


def test_within_five_percent_agrees() -> None:
    agrees, why = verdict(104.0, [100.0, 100.0, 100.0])
    assert agrees and why.startswith("agrees: within 5%")


def test_a_wider_gap_agrees_only_inside_the_plain_loops_spread() -> None:
    agrees, why = verdict(108.0, [90.0, 100.0, 110.0])  # spread ±10% covers 8%
    assert agrees and "spread (±10.0%) covers the 8.0% gap" in why
    agrees, why = verdict(108.0, [99.0, 100.0, 101.0])
    assert not agrees and why.startswith("disagrees: 8.0% apart")
    assert verdict(None, [100.0]) == (False, "no figure to compare")


def test_the_defaults_rounds_are_the_choices_over_each_rounds_speedup() -> None:
    result: Any = types.SimpleNamespace(
        baseline=object(), rates=(200.0, 300.0, 240.0), speedup_rounds=(2.0, 3.0, 2.4)
    )
    assert baseline_rounds(result) == pytest.approx((100.0, 100.0, 100.0))
    result.speedup_rounds = (2.0,)  # the default missed rounds: no per-round figures
    assert baseline_rounds(result) == ()


def fake_result(**changes: Any) -> Any:
    fields = {
        "baseline": types.SimpleNamespace(settings=DEFAULT, samples_per_s=100.0),
        "settings": CHOSEN,
        "samples_per_s": 250.0,
        "rates": (240.0, 250.0, 260.0),
        "speedup_rounds": (2.4, 2.5, 2.6),
        "device": "cpu",
        "user_batch": 64,
        "confirmed": True,
        "rounds": 3,
        "noise": 0.02,
        "is_default": False,
        "search_time": SearchTime(total_s=30.0, stages=(("preflight", 1.0), ("explore", 20.0))),
    }
    return types.SimpleNamespace(**{**fields, **changes})


def test_a_workload_is_searched_then_both_configs_measured_by_the_plain_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    searched: dict[str, Any] = {}

    def search(config: Path, **options: Any) -> Any:
        searched.update(options, config=config)
        return fake_result()

    figures = {
        ("probe", DEFAULT.key()): iter([100.0, 102.0, 98.0]),
        ("plain", DEFAULT.key()): iter([101.0, 99.0, 100.0]),
        ("probe", CHOSEN.key()): iter([250.0, 240.0, 260.0]),
        ("plain", CHOSEN.key()): iter([200.0, 205.0, 210.0]),
    }
    order: list[tuple[str, str]] = []

    def instrument(kind: str) -> Any:
        def measure(config: Path, settings: Settings, **options: Any) -> float:
            assert options["device"] == "cpu" and options["seconds"] == 4.5
            order.append((kind, settings.describe()))
            return next(figures[kind, settings.key()])

        return measure

    monkeypatch.setattr(autotune, "search", search)
    monkeypatch.setattr(_side_by_side, "probe_rate", instrument("probe"))
    monkeypatch.setattr(_side_by_side, "measure", instrument("plain"))
    workload = find(["compute-bound"])[0]
    options = _agreement.AgreementOptions(rounds=3, trials=4, study_dir=tmp_path)
    machine: Any = types.SimpleNamespace(gpus=())
    section = _agreement.run_workload(workload, options, machine, lambda line: None)

    assert searched["trials"] == 4 and searched["seed"] == 0
    assert section["search"]["search_time"]["stages"] == [["preflight", 1.0], ["explore", 20.0]]
    assert Path(searched["study"]).parent == tmp_path
    # Each config by both instruments in each round, one right after the other, the
    # probe first in even rounds and the plain loop first in odd ones.
    assert [kind for kind, _ in order[:4]] == ["probe", "plain", "probe", "plain"]
    assert [kind for kind, _ in order[4:8]] == ["plain", "probe", "plain", "probe"]
    assert len(order) == 12
    default, chosen = section["rows"]
    assert default["agrees"] and default["ratio"] == pytest.approx(1.0)
    assert default["search"]["interval"] == pytest.approx([100.0, 100.0])
    assert not chosen["agrees"] and chosen["ratio"] == pytest.approx(250 / 205)
    assert chosen["search"]["interval"] == [240.0, 260.0]
    assert chosen["search_ratio"] == pytest.approx(250 / 205)
    json.dumps(section)  # JSON types only
    table = markdown(section)
    assert (
        "| autotune | workers=2 prefetch=2 persistent=yes batch=64 | 250 (240-260) | 250 (±4.0%) |"
        in table
    )
    assert "205 (±2.4%) | 1.220 | disagrees" in table


def test_the_probe_is_timed_as_long_as_a_confirming_rounds_probe() -> None:
    search = autotune.SearchOptions()
    seconds = _agreement.AgreementOptions().seconds
    request = _side_by_side.probe_request(
        Path("w.py"), CHOSEN, seconds=seconds, warmup=0.5, device="cpu", seed=0
    )
    assert request.window_seconds == search.window_seconds
    assert request.max_windows == search.max_windows


def test_a_search_kept_before_is_read_not_run_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for stamp in ("20261128-230000", "20261129-010000"):
        (tmp_path / f"agreement-compute_bound-seed0-{stamp}.db").touch()
    (tmp_path / "agreement-compute_bound-seed1-20261130-000000.db").touch()  # another seed
    loaded: list[Path] = []

    def load(path: Path) -> Any:
        loaded.append(path)
        return fake_result()

    def search(config: Path, **options: Any) -> Any:
        raise AssertionError("searched again")

    monkeypatch.setattr(autotune, "load", load)
    monkeypatch.setattr(autotune, "search", search)
    monkeypatch.setattr(_side_by_side, "probe_rate", lambda *a, **k: 100.0)
    monkeypatch.setattr(_side_by_side, "measure", lambda *a, **k: 100.0)
    workload = find(["compute-bound"])[0]
    options = _agreement.AgreementOptions(rounds=1, from_studies=tmp_path)
    machine: Any = types.SimpleNamespace(gpus=())
    section = _agreement.run_workload(workload, options, machine, lambda _: None)

    assert loaded == [tmp_path / "agreement-compute_bound-seed0-20261129-010000.db"]
    assert section["search"]["read"] and section["search"]["wall_s"] is None
    assert "search read from agreement-compute_bound-seed0-20261129-010000.db." in markdown(section)
    with pytest.raises(FileNotFoundError, match="no study agreement-io_bound-seed0-"):
        _agreement.run_workload(find(["io-bound"])[0], options, machine, lambda _: None)


def test_a_default_chosen_is_measured_once() -> None:
    sides = _agreement.probe_sides(fake_result(settings=DEFAULT, samples_per_s=100.0), 64)
    assert [side.settings for side in sides] == [DEFAULT, DEFAULT]
    side = ProbeSide(label="default", settings=DEFAULT, samples_per_s=None, rounds=())
    assert _agreement._row(side, [], [100.0])["why"] == "no figure to compare"


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "1"],  # a flag without a suite
        ["suite", "--seconds", "1"],  # an agreement flag given to the suite
        ["agreement", "--quick"],
        ["agreement", "--trials", "0"],
        ["agreement", "online"],  # two suites
        ["agreement", "--rounds", "0"],
        ["agreement", "--workloads", "tape-drive"],
        ["agreement", "--from-studies", ".", "--trials", "4"],  # reads, does not search
        ["agreement", "--from-studies", "no/such/folder"],
        ["generalise", "--from-studies", "."],
    ],
)
def test_the_command_line_refuses_what_does_not_apply(argv: list[str]) -> None:
    assert _cli.main(argv) == 2


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {"rounds": 5, "seconds": 4.5, "warmup": 0.5}),
        (
            ["--rounds", "3", "--seconds", "2", "--warmup", "1"],
            {"rounds": 3, "seconds": 2.0, "warmup": 1.0},
        ),
    ],
)
def test_the_command_line_takes_the_options_defaults_for_what_it_leaves_out(
    checks_run: list[Any], tmp_path: Path, flags: list[str], expected: dict[str, Any]
) -> None:
    argv = ["agreement", "--workloads", "compute-bound", "--from-studies", str(tmp_path)]
    assert _cli.main([*argv, *flags]) == 0
    options = checks_run[0].header["options"]
    assert {k: options[k] for k in expected} == expected
