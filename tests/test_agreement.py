"""The agreement check (python -m benchmarks --agreement) on made-up figures: the
verdict, the default loader's rounds, the section and table, the command line."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune import Settings
from benchmarks import _agreement, _cli
from benchmarks._agreement import ProbeSide, baseline_rounds, markdown, verdict
from benchmarks._workloads import find

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
    }
    return types.SimpleNamespace(**{**fields, **changes})


def test_a_workload_is_searched_then_both_configs_measured_by_the_plain_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    searched: dict[str, Any] = {}

    def search(config: Path, **options: Any) -> Any:
        searched.update(options, config=config)
        return fake_result()

    def measure(config: Path, settings: list[Settings], **options: Any) -> list[list[float]]:
        assert settings == [DEFAULT, CHOSEN] and options["device"] == "cpu"
        return [[101.0, 99.0, 100.0], [200.0, 205.0, 210.0]]

    monkeypatch.setattr(autotune, "search", search)
    monkeypatch.setattr(_agreement, "measure_interleaved", measure)
    workload = find(["compute-bound"])[0]
    options = _agreement.AgreementOptions(rounds=3, trials=4, study_dir=tmp_path)
    machine: Any = types.SimpleNamespace(gpus=())
    section = _agreement.run_workload(workload, options, machine, lambda line: None)

    assert searched["trials"] == 4 and searched["seed"] == 0
    assert Path(searched["study"]).parent == tmp_path
    default, chosen = section["rows"]
    assert default["agrees"] and default["ratio"] == pytest.approx(1.0)
    assert default["probe"]["interval"] == pytest.approx([100.0, 100.0])
    assert not chosen["agrees"] and chosen["ratio"] == pytest.approx(250 / 205)
    assert chosen["probe"]["interval"] == [240.0, 260.0]
    json.dumps(section)  # JSON types only
    table = markdown(section)
    assert "| autotune | workers=2 prefetch=2 persistent=yes batch=64 | 250 (240-260) |" in table
    assert "205 (±2.4%) | 1.220 | disagrees" in table


def test_a_default_chosen_is_measured_once() -> None:
    sides = _agreement.probe_sides(fake_result(settings=DEFAULT, samples_per_s=100.0), 64)
    assert [side.settings for side in sides] == [DEFAULT, DEFAULT]
    side = ProbeSide(label="default", settings=DEFAULT, samples_per_s=None, rounds=())
    assert _agreement._row(side, [100.0])["why"] == "no figure to compare"


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "1"],  # an agreement flag without --agreement
        ["agreement", "--quick"],
        ["--agreement", "--trials", "0"],
        ["agreement", "--workloads", "tape-drive"],
    ],
)
def test_the_command_line_refuses_what_does_not_apply(argv: list[str]) -> None:
    assert _cli.main(argv) == 2
