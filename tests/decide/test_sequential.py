"""Sequential confirmation: which finalists a further round measures, and when the rounds
so far settle the choice, over set figures and through :func:`confirm` with a stand-in
backend."""

from __future__ import annotations

import dataclasses

from test_confirm import DEFAULT, Recorded, finalists_in, run
from test_confirm import workers as loader
from test_rounds import against, default, workers

from autotune import Settings
from autotune.decide._sequential import runoff_settled, settled, standing

RULE = {"band": 0.05, "rounds": 3, "tolerance": 0.03, "user_batch": 32}
"""A 5% band, 3 rounds in all, a tolerance of 3%, the user's batch of 32."""
TIED = {"band": 0.03, "rounds": 5, "tolerance": 0.03, "user_batch": 32}
"""Rounds that read finer than the 3% tolerance (the band is the tolerance), 5 in all."""


def test_a_finalist_slower_than_the_default_in_one_round_stands_no_more() -> None:
    base = default(100, 100)
    ahead = against(base, workers(4), 150, 140)
    behind_once = against(base, workers(2), 150, 99)
    failed = against(base, workers(1), 150, None)
    assert standing([ahead, behind_once, failed], base, rounds=3, tolerance=0.03) == [ahead]


def test_a_finalist_within_the_tolerance_in_most_rounds_stands_no_more() -> None:
    base = default(100, 100)
    # 2% faster in both rounds: the median of 3 cannot pass 1 + tolerance any more.
    twice_within = against(base, workers(2), 102, 102)
    # Within in one round only: a third could still carry the median beyond.
    once_within = against(base, workers(4), 102, 150)
    assert standing([twice_within, once_within], base, rounds=3, tolerance=0.03) == [once_within]
    # Of 5 rounds, two within leave the median open; three would not.
    assert standing([twice_within], base, rounds=5, tolerance=0.03) == [twice_within]


def test_while_the_default_failed_a_round_every_finalist_stands() -> None:
    base = default(100, None)
    finalists = [against(base, workers(4), 150, 140), against(base, workers(2), 90, 80)]
    assert standing(finalists, base, rounds=3, tolerance=0.03) == finalists


def test_no_finalist_standing_settles_on_the_default() -> None:
    base = default(100, 100)
    done = settled(
        [against(base, workers(4), 99, 140), against(base, workers(2), 95, 98)], base, **RULE
    )
    assert done is not None and done.leader is None
    assert "the default loader stands" in done.reason


def test_one_round_settles_nothing() -> None:
    base = default(100)
    assert settled([against(base, workers(4), 90)], base, **RULE) is None


def test_a_leader_far_beyond_the_noise_and_ahead_of_the_rest_settles_it() -> None:
    base = default(100, 100)
    leader = against(base, workers(4), 300, 310)
    slower = against(base, workers(2), 150, 152)
    done = settled([leader, slower], base, **RULE)
    assert done is not None and done.leader is leader
    assert done.reason.startswith(f"{workers(4).describe()} is 3.05x the default loader")


def test_a_close_second_keeps_the_rounds_going() -> None:
    base = default(100, 100)
    leader = against(base, workers(4), 300, 310)
    # Behind by 4% only: within the band, so the cheaper one may yet be chosen.
    second = against(base, workers(2), 290, 296)
    assert settled([leader, second], base, **RULE) is None
    # Behind by more than the band in both rounds, but too noisy to predict the next.
    noisy = against(base, workers(2), 150, 280)
    assert settled([leader, noisy], base, **RULE) is None


def test_a_leader_whose_next_round_could_fall_within_the_band_settles_nothing() -> None:
    base = default(100, 100)
    # 1.6x and 1.2x: beyond a 5% band in both rounds, but the spread between them leaves
    # the next round's 95% prediction below 1.05.
    assert settled([against(base, workers(4), 160, 120)], base, **RULE) is None
    # Within the band in one round: not beyond the noise in every round.
    assert settled([against(base, workers(4), 300, 104)], base, **RULE) is None


def test_finalists_tied_at_a_ceiling_settle_on_the_cheapest_once_most_rounds_agree() -> None:
    base = default(100, 100, 100)
    tied = [
        against(base, workers(4), 200, 201, 199),
        against(base, workers(1), 199, 200, 200),
        against(base, workers(2), 201, 199, 200),
    ]
    done = settled(tied, base, **TIED)
    # 3 of 5 rounds within the tolerance of each other: the cheapest is kept whatever
    # the last two read, and every one beats the default far beyond the noise.
    assert done is not None and done.leader is tied[1]
    assert done.reason.startswith("all 3 finalists left beat the default loader")
    # After 2 of 5 rounds, 3 more could still put the cheapest out.
    two = default(100, 100)
    early = [against(two, workers(4), 200, 201), against(two, workers(1), 199, 200)]
    assert settled(early, two, **TIED) is None


def test_tied_finalists_settle_nothing_while_one_may_yet_fall_to_the_default() -> None:
    base = default(100, 100, 100)
    # Tied in every round, but 1.10x with a spread that leaves the next round open.
    tied = [
        against(base, workers(4), 104, 125, 104),
        against(base, workers(1), 104, 125, 104),
    ]
    assert settled(tied, base, **TIED) is None
    # Rounds noisier than the tolerance (a runoff follows): the tie is left to it.
    firm = [against(base, workers(4), 200, 201, 199), against(base, workers(1), 199, 200, 200)]
    assert settled(firm, base, **{**TIED, "band": 0.05}) is None


def test_finalists_tied_at_a_ceiling_are_confirmed_in_three_of_five_rounds() -> None:
    progress = Recorded()
    backend, confirmed = run(
        lambda s, r: 500.0 if s == DEFAULT else 2000.0 + (r % 2) * s.num_workers,
        progress=progress,
        rounds=5,
    )
    assert backend.rounds == 3 and confirmed.rounds == 3
    assert confirmed.winner.settings == loader(1) and not confirmed.is_default
    assert any(m.startswith("after 3 rounds: all 3 finalists") for m in progress.messages)


def test_a_clear_winner_is_confirmed_in_two_rounds_and_says_so() -> None:
    progress = Recorded()
    backend, confirmed = run(
        lambda s, r: 500.0 if s == DEFAULT else (2000.0 if s.num_workers == 4 else 700.0),
        progress=progress,
    )
    assert backend.rounds == 2 and confirmed.rounds == 2
    assert confirmed.winner.settings == loader(4) and not confirmed.is_default
    assert any(m.startswith("after 2 rounds: ") and "settled" in m for m in progress.messages)
    assert len(confirmed.speedup_rounds) == 2


def test_a_third_round_measures_only_the_finalists_that_can_still_be_chosen() -> None:
    swing = (1.0, 1.3, 1.1)

    def rate(s: Settings, r: int) -> float:
        if s == DEFAULT:
            return 1000.0
        if s == loader(1):
            return (1100.0, 990.0, 1100.0)[r]  # slower than the default in round 2
        return 1000.0 + 100 * s.num_workers * swing[r]

    progress = Recorded()
    backend, confirmed = run(rate, progress=progress)
    assert backend.rounds == 3 and confirmed.rounds == 3
    third = finalists_in(backend.orders[2])
    assert sorted(third) == sorted([loader(4).key(), loader(2).key()])
    assert any(m.startswith("round 3: 2 of 3 finalists measured again") for m in progress.messages)
    # The withdrawn finalist keeps its two rounds; the chosen one has all three.
    assert confirmed.winner.settings == loader(4)
    assert len(confirmed.speedup_rounds) == 3


def test_a_runoff_settles_on_the_cheapest_contender_surely_kept() -> None:
    base = default(100, 100, 100, 100)
    cheap = against(base, workers(1), 200, 198, 201, 199)
    dear = against(base, workers(4), 202, 200, 199, 200)
    # 4 of 6 rounds within the tolerance of each other: neither median can leave it.
    assert runoff_settled([dear, cheap], rounds=6, tolerance=0.03, user_batch=32) is cheap
    # 3 of 6 only: three more rounds could still put the cheap one out.
    fewer = default(100, 100, 100)
    three = [against(fewer, workers(1), 200, 198, 201), against(fewer, workers(4), 202, 200, 199)]
    assert runoff_settled(three, rounds=6, tolerance=0.03, user_batch=32) is None


def test_a_runoff_passes_over_a_cheaper_contender_surely_out() -> None:
    base = default(100, 100, 100, 100)
    cheap = against(base, workers(1), 150, 160, 150, 210)  # >3% behind in 3 of 4 rounds
    dear = against(base, workers(4), 200, 200, 200, 200)
    assert runoff_settled([cheap, dear], rounds=5, tolerance=0.03, user_batch=32) is dear
    # Out in 2 of 5 only: it may yet be kept, and it is the cheaper.
    early = [
        dataclasses.replace(r, measurements=r.measurements[:2], beside=r.beside[:2])
        for r in (cheap, dear)
    ]
    assert runoff_settled(early, rounds=5, tolerance=0.03, user_batch=32) is None


def test_a_runoff_with_a_failed_round_settles_nothing() -> None:
    base = default(100, 100, 100)
    failed = against(base, workers(1), 200, None, 200)
    other = against(base, workers(4), 100, 100, 100)
    assert runoff_settled([failed, other], rounds=4, tolerance=0.03, user_batch=32) is None
