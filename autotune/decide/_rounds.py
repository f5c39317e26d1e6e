"""Confirmation rounds as a measurement: the finalists and the default loader measured
in interleaved rounds, the default beside the finalists, a median per config, the noise
between rounds, and the verdict.

Pure functions over the rounds' figures, so the rule is testable alone:

- a round measures the default loader first, last, and after every two finalists
  (:func:`interleaved`: D A B D C E D), and each finalist's speedup in a round is taken
  against the default measured next to it (:func:`gather`: the geometric mean of the
  nearest measurements before and after it, one of them adjacent, the other two
  probes away at most). The machine's speed moves within a round of minutes
  (large-model, seed 1 at 22babf0: a round's first four configs at 446-491 samples/s,
  its last three, the default among them, at 351-373), and a ratio between configs
  measured far apart in a round carried that change into the verdict; beside the
  default next door, a steady drift leaves at most half a probe's worth of it, and
  the turning order gives it back in the next round. A default beside every finalist
  would cancel even that, at one more probe for every two finalists;
- each config's figure is the median of its rounds; compared with the others, it is the
  default's median times the median of its speedups (:func:`side_by_side`), so configs
  measured at different moments of a round are compared through the default measured
  beside each;
- the noise is what those speedups show between rounds: for each complete finalist,
  half the range of its speedups over their median, and the median of that over the
  finalists;
- the band is the larger of the tolerance and that noise;
- the speedup over the default is the median of the per-round speedups; the result
  prints a prediction interval from them (:mod:`autotune.result._predict`);
- the default loader wins unless a finalist's speedup is beyond the band, and it was
  faster in every round (a config that lost one round to the default beside it has not
  shown that it is faster); among those that do, the cheapest within the tolerance of
  the fastest is chosen. The speedup judged is the one printed.

Why the band guards the default and the tolerance picks among the finalists: the band
answers "is it faster at all?", where being wrong sells a slowdown; among configs that
all beat the default, the cheapest within the noise band gave away up to the band every
time (tiny-model at 926df22: noise 3-8%, three choices with fewer workers or a smaller
batch than the leader, 0.88-0.94 of the plain loop's best). Within the noise, the
fastest median is the better bet for speed; the tolerance still lets a cheaper config
win where the two measure alike.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from autotune.decide._choose import Candidate, cheapest_within
from autotune.probe import Measurement
from autotune.settings._settings import Settings


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
    def speedups(self) -> tuple[float, ...]:
        """This config over the default measured beside it, in each round that measured
        both: the speedup, round by round."""
        return tuple(
            m.samples_per_s / d
            for m, d in zip(self.measurements, self.beside, strict=False)
            if m is not None and d is not None and d > 0
        )

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


def relative_spread(rates: Sequence[float]) -> float | None:
    """Half the range of ``rates`` over their median; None for fewer than 2."""
    if len(rates) < 2:
        return None
    middle = statistics.median(rates)
    if middle <= 0:
        return None
    return (max(rates) - min(rates)) / (2 * middle)


BESIDE = 2
"""A confirming round measures the default loader after every this many finalists."""


def interleaved(configs: Sequence[Settings], default: Settings) -> list[Settings]:
    """The configs of a confirming round in order: the default loader first, last, and
    after every :data:`BESIDE` configs (D A B D C E D); the default alone when there is
    no config.

    Raises:
        ValueError: a config is the default (measured as one, it could beat itself).
    """
    if default in configs:
        raise ValueError(f"{default.describe()} is the default loader, measured every round")
    order = [default]
    for start in range(0, len(configs), BESIDE):
        order += [*configs[start : start + BESIDE], default]
    return order


def gather(
    order: Sequence[Settings], found: Sequence[Sequence[Measurement | None]]
) -> tuple[list[Rounds], Rounds]:
    """The finalists' rounds and the default loader's, from the measurements of rounds
    laid out as :func:`interleaved` gives them, the default at least
    (``found[position][round]``, None where a probe failed).

    A finalist is measured beside the geometric mean of the default's measurements
    nearest before and after it in the round (the one that measured, where the other
    failed). The default's figure of a round is its median measurement there (the lower
    middle), None where every one of them failed.
    """
    count = len(found[0])
    at_default = [p for p, settings in enumerate(order) if settings == order[0]]
    finalists = []
    for position, settings in enumerate(order):
        if position in at_default:
            continue
        before = max(p for p in at_default if p < position)
        after = min(p for p in at_default if p > position)
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
        if rounds.complete and (spread := relative_spread(rounds.speedups)) is not None
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
    (:func:`beats_default`); otherwise the cheapest of those within ``tolerance`` of the
    fastest, side by side (:func:`side_by_side`).

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
    near = side_by_side(complete, default)
    if kept is not None:
        by_settings = {r.settings.key(): r for r in complete}
        near = [c for c in near if beats_default(by_settings[c.settings.key()], band)]
        if not near:
            return kept
    pick = cheapest_within(near, tolerance, user_batch=user_batch)
    return next(r for r in complete if r.settings == pick.settings)


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
