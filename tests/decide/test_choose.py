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
    assert cheapest_within(candidates, 0.02, user_batch=32).settings.num_workers == 2
    assert cheapest_within(candidates, 0.0, user_batch=32).settings.num_workers == 8
    assert cheapest_within(candidates, 0.15, user_batch=32).settings.num_workers == 1


def test_cost_puts_training_changes_before_machine_cost() -> None:
    assert cost(s(echo=1, num_workers=8), 32) < cost(s(echo=2, num_workers=0), 32)
    assert cost(s(amp="off", num_workers=8), 32) < cost(s(amp="bf16", num_workers=0), 32)
    assert cost(s(batch_size=32, num_workers=8), 32) < cost(s(batch_size=64, num_workers=0), 32)
    assert cost(s(num_workers=2, prefetch_factor=8), 32) < cost(
        s(num_workers=3, prefetch_factor=1), 32
    )
    assert cost(s(num_workers=2, prefetch_factor=2), 32) < cost(
        s(num_workers=2, prefetch_factor=4), 32
    )
    assert cost(s(num_workers=2, persistent_workers=False), 32) < cost(
        s(num_workers=2, persistent_workers=True), 32
    )
    assert cost(s(threads=1), 32) < cost(s(threads=2), 32) < cost(s(threads=None), 32)
    # The workers' native threads last: fewer is cheaper, and no cap (torch's one per CPU
    # in each worker) the dearest.
    assert (
        cost(s(num_workers=2, worker_threads=1), 32)
        < cost(s(num_workers=2, worker_threads=2), 32)
        < cost(s(num_workers=2, worker_threads=None), 32)
    )
    assert cost(s(num_workers=2, threads=1, worker_threads=None), 32) < cost(
        s(num_workers=2, threads=2, worker_threads=1), 32
    )


def test_ties_go_to_the_faster() -> None:
    a, b = Candidate(s(num_workers=2), 100.0), Candidate(s(num_workers=2, prefetch_factor=2), 101.0)
    assert cheapest_within([a, b], 0.05, user_batch=32).samples_per_s == 101.0


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
    chosen = finalists(candidates, tolerance=0.03, limit=3, user_batch=32)
    # All four within 2 x 3% overlap the best, so all four (fewer than 2 x 3) go on.
    assert [c.settings.num_workers for c in chosen] == [6, 1, 5, 4]
    # A limit above what overlaps: the far one fills in, so all five are measured.
    assert len(finalists(candidates, tolerance=0.03, limit=10, user_batch=32)) == 5


def test_empty_and_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        cheapest_within([], 0.03, user_batch=32)
    with pytest.raises(ValueError, match="limit >= 1"):
        finalists([Candidate(s(), 1.0)], 0.03, 0, user_batch=32)


def test_the_users_batch_is_the_cheapest_then_the_nearest() -> None:
    # The user trains with 32: 32 beats both neighbours, whatever else they cost.
    assert cost(s(batch_size=32, num_workers=8), 32) < cost(s(batch_size=16, num_workers=0), 32)
    assert cost(s(batch_size=32, echo=2), 32) < cost(s(batch_size=64), 32)
    # One doubling away beats two, in either direction.
    assert cost(s(batch_size=64), 32) < cost(s(batch_size=128), 32)
    assert cost(s(batch_size=16), 32) < cost(s(batch_size=8), 32)
    # As far each way: the smaller batch is cheaper.
    assert cost(s(batch_size=16), 32) < cost(s(batch_size=64), 32)
    # Around another user's batch, the order follows it.
    assert cost(s(batch_size=128), 128) < cost(s(batch_size=32), 128)


def test_a_user_batch_within_tolerance_wins_over_a_faster_smaller_one() -> None:
    candidates = [Candidate(s(batch_size=16), 1000.0), Candidate(s(batch_size=32), 980.0)]
    assert cheapest_within(candidates, 0.03, user_batch=32).settings.batch_size == 32
    assert cheapest_within(candidates, 0.01, user_batch=32).settings.batch_size == 16


def test_finalists_fill_up_to_the_limit_and_grow_where_figures_overlap() -> None:
    spread = [Candidate(s(num_workers=w), 1000.0 - 100 * w) for w in range(5)]
    # Only the best is within 2 x 3%: the next fastest fill in up to the limit.
    assert [c.settings.num_workers for c in finalists(spread, 0.03, 3, user_batch=32)] == [
        0,
        1,
        2,
    ]
    close = [Candidate(s(num_workers=w), 1000.0 - w) for w in range(1, 9)]
    # Eight overlap the best: up to twice the limit of them.
    assert len(finalists(close, 0.03, 3, user_batch=32)) == 6
    assert len(finalists(spread[:2], 0.03, 3, user_batch=32)) == 2


def test_finalists_are_those_within_twice_the_tolerance() -> None:
    # At 5%, the finalist band reaches 10% below the best, and one finalist may be asked.
    candidates = [
        Candidate(s(num_workers=8), 1000.0),
        Candidate(s(num_workers=4), 901.0),  # 9.9% off: within 2 x 5%
        Candidate(s(num_workers=1), 899.0),  # 10.1% off: out, however cheap
    ]
    chosen = finalists(candidates, 0.05, limit=1, user_batch=32)
    assert [c.settings.num_workers for c in chosen] == [8, 4]
    assert [c.settings.num_workers for c in finalists(candidates[:1], 0.05, 1, user_batch=32)] == [
        8
    ]


def test_finalists_take_the_faster_of_equally_cheap_configs_first() -> None:
    # bf16 and fp16 cost the same: the faster of them is the cheap contender, so the
    # two places go to it and to the next fastest, not to the slower of the pair.
    fp16, bf16 = s(num_workers=2, amp="fp16"), s(num_workers=2, amp="bf16")
    more = s(num_workers=3, amp="fp16")
    candidates = [Candidate(fp16, 1000.0), Candidate(more, 999.0), Candidate(bf16, 998.0)]
    chosen = finalists(candidates, 0.03, limit=1, user_batch=32)
    assert [c.settings for c in chosen] == [fp16, more]
