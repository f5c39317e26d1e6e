"""The confirming rounds' record is declared once: the decide stage's Confirmed and every
SearchResult carry the same fields, under the same public names."""

from __future__ import annotations

import dataclasses

from autotune import Measurement, SearchResult, Settings
from autotune._noise import LogSpread
from autotune.decide._confirm import Confirmed
from autotune.machine import detect_machine
from autotune.probe import Figures, Window
from autotune.result import Confirmation


def names(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]


def test_confirmed_and_the_result_share_the_confirmations_fields() -> None:
    shared = names(Confirmation)
    assert len(shared) == 11
    assert names(Confirmed)[: len(shared)] == shared
    assert names(SearchResult)[: len(shared)] == shared


def test_a_result_carries_what_the_rounds_confirmed_and_saves_it_as_before() -> None:
    figures = Figures(
        windows=(Window(index=0, seconds=1.0, samples=900, fresh=900, steps=9, wait_seconds=0.1),)
    )
    chosen = Measurement(settings=Settings(batch_size=32, num_workers=2), figures=figures)
    default = Measurement(settings=Settings(batch_size=32), figures=figures)
    confirmed = Confirmed(
        winner=chosen,
        baseline=default,
        finalists=(chosen,),
        confirmed=True,
        rounds=3,
        noise=0.04,
        rates=(880.0, 900.0, 910.0),
        rates_spread=LogSpread(sd=0.02, degrees=4),
        speedup_rounds=(1.2, 1.3, 1.25),
        is_default=False,
    )
    result = SearchResult(
        settings=chosen.settings,
        figures=figures,
        device="cpu",
        machine=detect_machine(None),
        user_batch_size=32,
        **confirmed.confirmation(),
    )
    assert (result.baseline, result.finalists, result.rounds) == (default, (chosen,), 3)
    assert (result.noise, result.rates, result.speedup_rounds) == (
        0.04,
        (880.0, 900.0, 910.0),
        (1.2, 1.3, 1.25),
    )
    assert result.rates_spread == LogSpread(sd=0.02, degrees=4) and not result.is_default
    saved = result.to_dict()
    assert saved["rounds"] == 3 and saved["rates_spread"] == {"sd": 0.02, "degrees": 4}
    assert saved["baseline"] == default.to_dict() and saved["confirmed"] is True
    assert SearchResult.from_dict(saved) == dataclasses.replace(result, collate_fn=None)
