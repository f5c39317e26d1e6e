"""The choosing rule, alone."""

from __future__ import annotations

import pytest

from autotune import Settings
from autotune.decide._choose import Candidate, cheapest_within, cost, finalists, merge


def s(**fields) -> Settings:
    fields.setdefault("batch_size", 32)
    if fields.get("num_workers"):
        fields.setdefault("prefetch_factor", 2)
    return Settings(**fields)


def test_cheapest_within_tolerance_wins_over_the_fastest() -> None:
    candidates = [
        Candidate(s(num_workers=8), 1000.0),
        Candidate(s(num_workers=2), 985.0),  # 1.5% slower, 6 workers fewer
        Candidate(s(num_workers=1), 900.0),  # 10% slower: out
    ]
    assert cheapest_within(candidates, 0.02).settings.num_workers == 2
    assert cheapest_within(candidates, 0.0).settings.num_workers == 8
    assert cheapest_within(candidates, 0.15).settings.num_workers == 1


def test_cost_puts_training_changes_before_machine_cost() -> None:
    assert cost(s(echo=1, num_workers=8)) < cost(s(echo=2, num_workers=0))
    assert cost(s(amp="off", num_workers=8)) < cost(s(amp="bf16", num_workers=0))
    assert cost(s(batch_size=32, num_workers=8)) < cost(s(batch_size=64, num_workers=0))
    assert cost(s(num_workers=2, prefetch_factor=8)) < cost(s(num_workers=3, prefetch_factor=1))
    assert cost(s(num_workers=2, persistent_workers=False)) < cost(
        s(num_workers=2, persistent_workers=True)
    )
    assert cost(s(threads=1)) < cost(s(threads=2)) < cost(s(threads=None))


def test_ties_go_to_the_faster() -> None:
    a, b = Candidate(s(num_workers=2), 100.0), Candidate(s(num_workers=2, prefetch_factor=2), 101.0)
    assert cheapest_within([a, b], 0.05).samples_per_s == 101.0


def test_merge_takes_the_median_of_repeated_configs() -> None:
    merged = merge([Candidate(s(), 10.0), Candidate(s(), 30.0), Candidate(s(), 11.0)])
    assert merged == [Candidate(s(), 11.0)]


def test_finalists_mix_the_fastest_and_the_cheapest() -> None:
    candidates = [
        Candidate(s(num_workers=6), 1000.0),
        Candidate(s(num_workers=5), 990.0),
        Candidate(s(num_workers=4), 980.0),
        Candidate(s(num_workers=1), 960.0),  # within 2 x 3%
        Candidate(s(num_workers=0), 500.0),  # far off
    ]
    chosen = finalists(candidates, tolerance=0.03, limit=3)
    assert [c.settings.num_workers for c in chosen] == [6, 1, 5]
    assert len(finalists(candidates, tolerance=0.03, limit=10)) == 4


def test_empty_and_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        cheapest_within([], 0.03)
    with pytest.raises(ValueError, match="limit >= 1"):
        finalists([Candidate(s(), 1.0)], 0.03, 0)
