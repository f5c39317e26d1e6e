"""Confirmation rounds as a measurement: the finalists and the default loader measured
in interleaved rounds, a median per config, the noise between rounds, and the verdict.

Pure functions over the rounds' figures, so the rule is testable alone:

- a round measures the default loader first, last, and after every two finalists
  (:func:`interleaved`: D A B D C E D), and each finalist's speedup in a round is taken
  against the default measured next to it (:func:`gather`), since the machine's speed
  drifts within a round;
- each config's figure is the default's median times the median of its speedups
  (:func:`side_by_side`);
- the noise is the median, over the complete finalists, of half the range of a
  finalist's speedups over their median; the band is the larger of the tolerance and it;
- the default wins unless a finalist's median speedup is beyond the band and it was
  faster in every round, since being wrong there sells a slowdown; among those that are,
  the cheapest that no other trails by more than the tolerance, round by round
  (:func:`unbeaten`), is chosen, since a round's configs share the machine's state and
  its rounds do not;
- where the noise is wider than the tolerance, a runoff (:func:`contested`) measures the
  finalists within that noise of the fastest (up to :data:`RUNOFF`) in more rounds and
  orders them by the same rule (:func:`runoff_verdict`), since three rounds on shared
  CPUs cannot tell them apart; whether a finalist beats the default stays the first
  rounds' verdict.

The runs behind each rule are in ``docs/decisions.md``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from itertools import zip_longest

from autotune._noise import half_range
from autotune.decide._choose import Candidate, cheapest
from autotune.probe import Measurement
from autotune.settings import Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rounds:
    """One config's re-measurements, one per round, in round order; None for a round
    whose probe failed."""

    settings: Settings
    measurements: tuple[Measurement | None, ...]
    beside: tuple[float | None, ...] = ()
    """The default loader's samples/s measured next to this config in each round (see
    :func:`gather`), None where it measured nothing there; for the default itself, its
    own figure of each round. Empty: never measured beside the default."""

    @property
    def complete(self) -> bool:
        """Measured in every round: a config with a failed round is not chosen."""
        return bool(self.measurements) and all(m is not None for m in self.measurements)

    @property
    def rates(self) -> tuple[float, ...]:
        """samples/s of each round that measured."""
        return tuple(m.samples_per_s for m in self.measurements if m is not None)

    @property
    def round_speedups(self) -> tuple[float | None, ...]:
        """This config over the default measured beside it in each round, None where
        either measured nothing; empty when never measured beside the default."""
        if not self.beside:
            return ()
        return tuple(
            m.samples_per_s / d if m is not None and d is not None and d > 0 else None
            for m, d in zip_longest(self.measurements, self.beside)
        )

    @property
    def speedups(self) -> tuple[float, ...]:
        """This config over the default measured beside it, in each round that measured
        both: the speedup, round by round."""
        return tuple(s for s in self.round_speedups if s is not None)

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    def typical(self) -> Measurement:
        """The round whose figure is the median (the lower middle for an even count):
        real figures of one probe that stand for the config.

        Raises:
            ValueError: no round measured.
        """
        typical = _middle(self.measurements)
        if typical is None:
            raise ValueError(f"{self.settings.describe()} was measured in no round")
        return typical


BESIDE = 2
"""A confirming round measures the default loader after every this many finalists."""


def interleaved(
    configs: Sequence[Settings], default: Settings, *, in_turns: bool = False
) -> list[Settings]:
    """The configs of a confirming round in order: the default loader first, last, and
    after every :data:`BESIDE` configs (D A B D C E D), each a probe of its own; the
    default alone when there is no config. ``in_turns``: the round measures its configs
    in turns in one process, where every window lies beside the others', so the
    default comes once, first (D A B C E).

    Raises:
        ValueError: a config is the default (measured as one, it could beat itself).
    """
    if default in configs:
        raise ValueError(f"{default.describe()} is the default loader, measured every round")
    if in_turns:
        return [default, *configs]
    order = [default]
    for start in range(0, len(configs), BESIDE):
        order += [*configs[start : start + BESIDE], default]
    return order


def round_length(configs: int) -> int:
    """Probes in one round of :func:`interleaved` over ``configs`` configs (the default
    loader's included): what a progress estimate counts before the finalists are known."""
    return 1 + configs + math.ceil(configs / BESIDE)


def gather(
    order: Sequence[Settings], found: Sequence[Sequence[Measurement | None]]
) -> tuple[list[Rounds], Rounds]:
    """The finalists' rounds and the default loader's, from the measurements of rounds
    laid out as :func:`interleaved` gives them, the default at least
    (``found[position][round]``, None where a probe failed).

    A finalist is measured beside the geometric mean of the default's measurements
    nearest before and after it in the round (the one that measured, where the other
    failed; the one before where the round lists the default once, first, as a round
    measured in turns does). The default's figure of a round is its median measurement
    there (the lower middle), None where every one of them failed.
    """
    count = len(found[0])
    at_default = [p for p, settings in enumerate(order) if settings == order[0]]
    finalists = []
    for position, settings in enumerate(order):
        if position in at_default:
            continue
        before = max(p for p in at_default if p < position)
        after = min((p for p in at_default if p > position), default=before)
        beside = tuple(_geometric_mean([found[before][r], found[after][r]]) for r in range(count))
        finalists.append(
            Rounds(settings=settings, measurements=tuple(found[position]), beside=beside)
        )
    typical = tuple(_middle([found[p][r] for p in at_default]) for r in range(count))
    default = Rounds(
        settings=order[0],
        measurements=typical,
        beside=tuple(m.samples_per_s if m is not None else None for m in typical),
    )
    return finalists, default


def _geometric_mean(neighbours: Sequence[Measurement | None]) -> float | None:
    rates = [m.samples_per_s for m in neighbours if m is not None and m.samples_per_s > 0]
    return math.prod(rates) ** (1 / len(rates)) if rates else None


def _middle(measurements: Sequence[Measurement | None]) -> Measurement | None:
    """The measurement whose figure is the median (the lower middle for an even count);
    None when none measured."""
    measured = sorted((m for m in measurements if m is not None), key=lambda m: m.samples_per_s)
    return measured[(len(measured) - 1) // 2] if measured else None


def round_noise(finalists: Sequence[Rounds]) -> float:
    """The noise between rounds: the median over the complete finalists of the relative
    spread of their speedups over the default beside them (0.0 when none has two)."""
    spreads = [
        spread
        for rounds in finalists
        if rounds.complete and (spread := half_range(rounds.speedups)) is not None
    ]
    return statistics.median(spreads) if spreads else 0.0


def side_by_side(configs: Sequence[Rounds], default: Rounds | None) -> list[Candidate]:
    """Each complete config's figure as measured beside the default loader: the default's
    median times the median of the config's speedups over it. A config with no speedup
    to take (the default measured nothing beside it, or there is no default) keeps its
    own median."""
    reference = default.median if default is not None else 0.0
    candidates = []
    for rounds in configs:
        if not rounds.complete:
            continue
        speedups = rounds.speedups
        figure = (
            reference * statistics.median(speedups) if speedups and reference > 0 else rounds.median
        )
        candidates.append(Candidate(rounds.settings, figure))
    return candidates


def verdict(
    finalists: Sequence[Rounds],
    default: Rounds | None,
    *,
    band: float,
    tolerance: float,
    user_batch: int,
) -> Rounds:
    """The config to recommend: the default unless a finalist beats it beyond ``band``
    (:func:`beats_default`); otherwise the cheapest of those that no other trails by more
    than ``tolerance`` round by round (:func:`unbeaten`).

    Only complete configs count (a failed round's figures are never used).

    Raises:
        ValueError: no complete config, default included.
    """
    complete = [r for r in finalists if r.complete]
    kept = default if default is not None and default.complete else None
    if not complete:
        if kept is not None:
            return kept
        raise ValueError("no config was measured in every round")
    if kept is not None:
        complete = [r for r in complete if beats_default(r, band)]
        if not complete:
            return kept
    return unbeaten(complete, default, tolerance=tolerance, user_batch=user_batch)


def beats_default(chosen: Rounds, band: float) -> bool:
    """Whether ``chosen`` is faster than the default loader beyond the noise: its speedup
    (the median of :attr:`Rounds.speedups`) above 1 + ``band``, and faster in every round
    (:func:`beats_every_round`)."""
    return beats_every_round(chosen) and statistics.median(chosen.speedups) > 1.0 + band


def beats_every_round(chosen: Rounds) -> bool:
    """Whether ``chosen`` was faster than the default beside it in every round that
    measured both (and there was one): the lowest per-round speedup is above 1."""
    speedups = chosen.speedups
    return bool(speedups) and min(speedups) > 1.0


RUNOFF = 3
"""At most this many finalists go into a runoff (each costs a probe a round)."""


def contested(
    finalists: Sequence[Rounds],
    default: Rounds | None,
    *,
    band: float,
    tolerance: float,
    limit: int = RUNOFF,
) -> list[Rounds]:
    """The finalists whose order the rounds left open, fastest first: those that beat the
    default loader (:func:`beats_default`; every complete one where the default measured
    nothing) whose figure side by side (:func:`side_by_side`) is within ``band`` of the
    fastest of them, the fastest ``limit``.

    Empty when fewer than two are, or when ``band`` is no wider than ``tolerance``: the
    rounds then read finer than the tolerance, and more of them would choose alike.
    """
    if band <= tolerance:
        return []
    complete = [r for r in finalists if r.complete]
    if default is not None and default.complete:
        complete = [r for r in complete if beats_default(r, band)]
    figures = sorted(side_by_side(complete, default), key=lambda c: -c.samples_per_s)
    if len(figures) < 2:
        return []
    fastest = figures[0].samples_per_s
    near = [c.settings for c in figures if c.samples_per_s >= (1.0 - band) * fastest][:limit]
    if len(near) < 2:
        return []
    return [_rounds_of(complete, settings) for settings in near]


def extended(first: Rounds, more: Rounds) -> Rounds:
    """One config's rounds followed by the rounds of its runoff.

    Raises:
        ValueError: the two are of different configs.
    """
    if first.settings != more.settings:
        raise ValueError(
            f"rounds of {first.settings.describe()} extended by {more.settings.describe()}'s"
        )
    return Rounds(
        settings=first.settings,
        measurements=first.measurements + more.measurements,
        beside=first.beside + more.beside,
    )


def runoff_verdict(
    contenders: Sequence[Rounds], default: Rounds | None, *, tolerance: float, user_batch: int
) -> Rounds | None:
    """The cheapest of ``contenders`` that no other trails by more than ``tolerance`` over
    all their rounds (:func:`unbeaten`); None when none was measured in every round."""
    complete = [r for r in contenders if r.complete]
    if not complete:
        return None
    return unbeaten(complete, default, tolerance=tolerance, user_batch=user_batch)


def round_by_round(config: Rounds, *, speedups: bool = True) -> tuple[float | None, ...]:
    """``config``'s figure of each round, None where it measured nothing: its speedup over
    the default beside it (None where the default measured nothing there), or with
    ``speedups`` false or no default beside it at all, its samples/s."""
    if not speedups or not config.beside:
        return tuple(m.samples_per_s if m is not None else None for m in config.measurements)
    return config.round_speedups


def paired(config: Rounds, other: Rounds) -> float | None:
    """How fast ``config`` trains against ``other``: the median of their
    :func:`pair_ratios`; None where no round has both."""
    ratios = pair_ratios(config, other)
    return statistics.median(ratios) if ratios else None


def pair_ratios(config: Rounds, other: Rounds) -> list[float]:
    """``config``'s figure over ``other``'s in each round where both have one
    (:func:`round_by_round`): their speedups where both were measured beside the default,
    else their samples/s."""
    speedups = bool(config.beside) and bool(other.beside)
    return [
        mine / theirs
        for mine, theirs in zip(
            round_by_round(config, speedups=speedups),
            round_by_round(other, speedups=speedups),
            strict=False,
        )
        if mine is not None and theirs is not None and theirs > 0
    ]


def unbeaten(
    configs: Sequence[Rounds], default: Rounds | None, *, tolerance: float, user_batch: int
) -> Rounds:
    """The cheapest of ``configs`` that trails none of the others by more than
    ``tolerance``, round by round (:func:`paired` at ``1 - tolerance`` or above against
    each other config it shares a round with); ties go to the faster side by side
    (:func:`side_by_side`). Where every config trails another (an order that goes round
    in a circle), the fastest side by side. Only complete configs are chosen (their
    figures side by side are what orders them).

    Raises:
        ValueError: no config, or none measured in every round.
    """
    if not configs:
        raise ValueError("no config to choose from")
    figures = side_by_side(configs, default)
    fastest = max(figures, key=lambda c: c.samples_per_s) if figures else None
    eligible = [
        config
        for config in configs
        if all(
            ratio is None or ratio >= 1.0 - tolerance
            for other in configs
            if other is not config
            for ratio in [paired(config, other)]
        )
    ]
    if not eligible:
        if fastest is None:
            raise ValueError("no config was measured in every round")
        return _rounds_of(configs, fastest.settings)
    keys = {r.settings.key() for r in eligible}
    pick = cheapest([c for c in figures if c.settings.key() in keys], user_batch=user_batch)
    return _rounds_of(configs, pick.settings)


def _rounds_of(rounds: Sequence[Rounds], settings: Settings) -> Rounds:
    """The config of ``rounds`` with ``settings`` (a figure read from them names it)."""
    return next(r for r in rounds if r.settings == settings)
