"""Sequential confirmation: after each confirming round from the second, which finalists
can still be chosen, and whether the rounds left could still change the choice.

Over the rounds' figures alone, in the confirming rounds:

- a finalist that failed a round, that was no faster than the default loader beside it
  in one round, or within the tolerance of it in more than half the rounds to measure,
  can no longer be chosen (:func:`~autotune.decide._rounds.beats_default` asks for every
  round faster and a median beyond the band, which is never narrower than the
  tolerance), so it is not measured again (:func:`standing`); when none is left, the
  default loader is the choice, whatever later rounds would read;
- the choice is settled early (:func:`settled`) when one standing finalist, the leader,
  beat the default beyond the band in every round so far and its next round's 95%
  prediction lies above ``1 + band`` too, while every other standing finalist trailed it
  by more than the band in every round with a 95% prediction of its next round's ratio
  to the leader below ``1 - band`` (so no runoff between them is due either). Each
  skipped round would have overturned the leader's or another finalist's standing with
  a probability under 2.5% for each of them (the prediction's one-sided tail), under the
  interval's model of log-normal noise pooled over the finalists;
- the choice is settled early too when the rounds read finer than the tolerance (the
  band is the tolerance: no runoff follows) and every standing finalist beat the default
  beyond it in every round with a 95% prediction of its next round above it, so that
  each stays chosen over the default as the leader would, and the cheapest of them that
  trails none by more than the tolerance is already fixed by the rule that ends a runoff
  (:func:`runoff_settled`): finalists tied at a ceiling are told apart by their cost,
  which more rounds do not change.

And in the runoff, whose verdict keeps the cheapest contender that trails no other by
more than the tolerance (:func:`~autotune.decide._rounds.unbeaten`, on the median of
each pair's ratios over all the rounds): it ends once one contender trails no other by
more than the tolerance in more than half of all the rounds to measure, and every
cheaper one trails another by more in more than half (:func:`runoff_settled`), since
the medians cannot cross the tolerance after that, whatever the rounds left read.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune._noise import LogSpread, pooled_log_spread
from autotune.decide._choose import cost
from autotune.decide._rounds import Rounds, beats_every_round, pair_ratios, side_by_side
from autotune.result import prediction_interval

SETTLED_FROM = 2
"""Rounds measured before the choice may be settled: one round has no spread to predict
the next from."""


@dataclasses.dataclass(frozen=True)
class Settled:
    """The choice the rounds so far settled, and why, in a line for the user."""

    leader: Rounds | None
    """The finalist chosen; None: the default loader."""
    reason: str


def standing(
    finalists: Sequence[Rounds], default: Rounds, *, rounds: int, tolerance: float
) -> list[Rounds]:
    """The finalists that can still be chosen over the default loader after all
    ``rounds``: measured in every round so far, faster than the default beside them in
    each, and beyond ``1 + tolerance`` (the band's least) in enough of them that their
    median over ``rounds`` still can be. Every finalist while the default itself failed a
    round (the verdict then weighs the finalists alone)."""
    if not default.complete:
        return list(finalists)
    most_within = rounds // 2  # one more, and the median of `rounds` is within as well
    return [
        r
        for r in finalists
        if r.complete
        and beats_every_round(r)
        and sum(s <= 1.0 + tolerance for s in r.speedups) <= most_within
    ]


def settled(
    finalists: Sequence[Rounds],
    default: Rounds,
    *,
    band: float,
    rounds: int,
    tolerance: float,
    user_batch: int,
) -> Settled | None:
    """The choice the rounds measured so far settle, by the rules of the module, when
    ``rounds`` are to be measured in all; None while more rounds could still change it
    (or fewer than :data:`SETTLED_FROM` ran, or the default loader failed a round).
    ``user_batch`` is the batch size the costs of tied finalists are weighed against."""
    if len(default.measurements) < SETTLED_FROM or not default.complete:
        return None
    left = standing(finalists, default, rounds=rounds, tolerance=tolerance)
    if not left:
        return Settled(
            None,
            "no finalist can beat the default loader beyond the noise any more (each was "
            "slower in a round, within the tolerance in too many, or failed one): the "
            "default loader stands, whatever more rounds read",
        )
    spread = pooled_log_spread([r.speedups for r in finalists if r.complete])
    if spread is None:
        return None
    figures = {c.settings.key(): c.samples_per_s for c in side_by_side(left, default)}
    leader = max(left, key=lambda r: figures.get(r.settings.key(), 0.0))
    ahead = _surely_beyond(leader, spread, band)
    if ahead is None:
        return None
    if band <= tolerance and len(left) > 1:
        tied = _tied_pick(left, spread, band=band, rounds=rounds, user_batch=user_batch)
        if tied is not None:
            return tied
    # The ratio of two finalists' speedups carries the noise of both.
    pair = LogSpread(sd=spread.sd * math.sqrt(2.0), degrees=spread.degrees)
    for other in left:
        if other is leader:
            continue
        ratios = pair_ratios(other, leader)  # speedups: the default measured every round
        behind = prediction_interval(ratios, pair) if ratios else None
        if behind is None or max(ratios) >= 1.0 - band or behind[1] >= 1.0 - band:
            return None
    speedup = math.exp(sum(math.log(s) for s in leader.speedups) / len(leader.speedups))
    return Settled(
        leader,
        f"{leader.settings.describe()} is {speedup:.2f}x the default loader with the next "
        f"round predicted at {ahead:.2f}x or more, beyond the noise, and ahead of every "
        "other finalist: the choice is settled",
    )


def _surely_beyond(config: Rounds, spread: LogSpread, band: float) -> float | None:
    """The low end of the 95% prediction of ``config``'s next speedup over the default,
    where it beat the default beyond ``band`` in every round and that low end lies beyond
    ``band`` too; None otherwise."""
    ahead = prediction_interval(config.speedups, spread)
    if ahead is None or min(config.speedups) <= 1.0 + band or ahead[0] <= 1.0 + band:
        return None
    return ahead[0]


def _tied_pick(
    left: Sequence[Rounds], spread: LogSpread, *, band: float, rounds: int, user_batch: int
) -> Settled | None:
    """The cheapest standing finalist no other can beat by more than ``band`` (the
    tolerance here), once every standing one surely beats the default loader: beyond
    ``band`` in every round, with the next round's 95% prediction beyond it too."""
    if any(_surely_beyond(config, spread, band) is None for config in left):
        return None
    pick = runoff_settled(left, rounds=rounds, tolerance=band, user_batch=user_batch)
    if pick is None:
        return None
    return Settled(
        pick,
        f"all {len(left)} finalists left beat the default loader beyond the noise, and "
        f"{pick.settings.describe()} is the cheapest that trails none of them by more "
        "than the tolerance in most of the rounds to measure: the choice is settled",
    )


def runoff_settled(
    contenders: Sequence[Rounds], *, rounds: int, tolerance: float, user_batch: int
) -> Rounds | None:
    """The runoff's choice once the rounds measured so far settle it, when ``rounds`` are
    to be measured in all: the cheapest contender not surely out, where it is surely kept
    and no other of its cost may be kept (a tie goes to the faster, which more rounds may
    change); None while more rounds could change which it is, or a contender failed a
    round (a failure changes who counts).

    Surely kept: against every other contender, at or above ``1 - tolerance`` in more
    than half of ``rounds``. Surely out: below that against some other contender in more
    than half of them. Either way the median of ``rounds`` pair ratios is fixed on its
    side of the tolerance."""
    if len(contenders) < 2 or not all(r.complete for r in contenders):
        return None
    least = rounds // 2 + 1
    floor = 1.0 - tolerance

    def kept(config: Rounds) -> bool:
        return all(
            sum(ratio >= floor for ratio in pair_ratios(config, other)) >= least
            for other in contenders
            if other is not config
        )

    def out(config: Rounds) -> bool:
        return any(
            sum(ratio < floor for ratio in pair_ratios(config, other)) >= least
            for other in contenders
            if other is not config
        )

    ordered = sorted(contenders, key=lambda r: cost(r.settings, user_batch))
    for config in ordered:
        if out(config):
            continue
        price = cost(config.settings, user_batch)
        tied = any(
            other is not config and cost(other.settings, user_batch) == price and not out(other)
            for other in contenders
        )
        return config if kept(config) and not tied else None
    return None
