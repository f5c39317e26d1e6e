"""Confirmation rounds as a measurement: the finalists and the default loader measured
in interleaved rounds, a median per config, the noise between rounds, and the verdict.

Pure functions over the rounds' figures, so the rule is testable alone:

- each config's figure is the median of its rounds;
- configs are compared side by side: each round measures every config, so a config's
  figure beside the fastest (the highest median) is the median of its per-round ratios
  to it. A round that slowed the whole machine slowed every config alike and cancels
  out; an absolute spread would count that drift as noise and tie configs that were
  apart in every round;
- the noise is what those ratios show: for each complete config but the fastest, half
  the range of its ratios over their median, and the median of that over the configs;
- the band is the larger of the tolerance and that noise;
- the speedup over the default is the median of the per-round ratios (each round
  measures both side by side); the result prints a prediction interval from them
  (:mod:`autotune.result._predict`);
- the default loader wins unless a config's speedup is beyond the band, and it was
  faster in every round both measured (side by side, so a round that slowed the
  machine slowed both: a config that lost one round has not shown that it is
  faster); among those that do, the cheapest within the band of the fastest is
  chosen. The speedup judged is the one printed: a ratio of the two medians would
  take the config and the default from different rounds, and a round that slowed
  the machine for both would count against the config.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from autotune.decide._choose import Candidate, cheapest_within, within
from autotune.probe import Measurement
from autotune.settings._settings import Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rounds:
    """One config's re-measurements, one per round, in round order; None for a round
    whose probe failed."""

    settings: Settings
    measurements: tuple[Measurement | None, ...]

    @property
    def complete(self) -> bool:
        """Measured in every round: a config with a failed round is not chosen."""
        return bool(self.measurements) and all(m is not None for m in self.measurements)

    @property
    def rates(self) -> tuple[float, ...]:
        """samples/s of each round that measured."""
        return tuple(m.samples_per_s for m in self.measurements if m is not None)

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    def typical(self) -> Measurement:
        """The round whose figure is the median (the lower middle for an even count):
        real figures of one probe that stand for the config.

        Raises:
            ValueError: no round measured.
        """
        measured = sorted(
            (m for m in self.measurements if m is not None), key=lambda m: m.samples_per_s
        )
        if not measured:
            raise ValueError(f"{self.settings.describe()} was measured in no round")
        return measured[(len(measured) - 1) // 2]


def relative_spread(rates: Sequence[float]) -> float | None:
    """Half the range of ``rates`` over their median; None for fewer than 2."""
    if len(rates) < 2:
        return None
    middle = statistics.median(rates)
    if middle <= 0:
        return None
    return (max(rates) - min(rates)) / (2 * middle)


def fastest(configs: Sequence[Rounds]) -> Rounds | None:
    """The complete config with the highest median (the first of equals); None if none."""
    complete = [r for r in configs if r.complete]
    return max(complete, key=lambda r: r.median) if complete else None


def round_noise(configs: Sequence[Rounds]) -> float:
    """The noise between rounds, side by side: the median over the complete configs but
    the fastest of the relative spread of their per-round ratios to the fastest (0.0
    when no two complete configs were measured in two rounds)."""
    reference = fastest(configs)
    if reference is None:
        return 0.0
    spreads = [
        spread
        for rounds in configs
        if rounds.complete
        and rounds is not reference
        and (spread := relative_spread(paired_ratios(rounds, reference))) is not None
    ]
    return statistics.median(spreads) if spreads else 0.0


def side_by_side(configs: Sequence[Rounds]) -> list[Candidate]:
    """Each complete config's figure as measured beside the fastest: the fastest's median
    times the median of the config's per-round ratios to it (the fastest, and a config
    with no round to compare, keep their own median)."""
    reference = fastest(configs)
    if reference is None:
        return []
    candidates = []
    for rounds in configs:
        if not rounds.complete:
            continue
        ratios = paired_ratios(rounds, reference)  # all 1.0 for the fastest itself
        figure = reference.median * statistics.median(ratios) if ratios else rounds.median
        candidates.append(Candidate(rounds.settings, figure))
    return candidates


def verdict(
    finalists: Sequence[Rounds],
    default: Rounds | None,
    *,
    band: float,
    user_batch: int,
) -> Rounds:
    """The config to recommend: the default unless a finalist beats it
    (:func:`beats_default`); otherwise the cheapest of those within ``band`` of the
    fastest, side by side (:func:`side_by_side`).

    Only complete configs count (a failed round's figures are never used).

    Raises:
        ValueError: no complete config, default included.
    """
    complete = [r for r in finalists if r.complete]
    has_default = default is not None and default.complete
    if not complete:
        if default is not None and has_default:
            return default
        raise ValueError("no config was measured in every round")
    near = within(side_by_side(complete), band)
    if default is not None and has_default:
        by_settings = {r.settings.key(): r for r in complete}
        near = [c for c in near if beats_default(by_settings[c.settings.key()], default, band)]
        if not near:
            return default
    pick = cheapest_within(near, band, user_batch=user_batch)
    return next(r for r in complete if r.settings == pick.settings)


def paired_ratios(chosen: Rounds, default: Rounds) -> tuple[float, ...]:
    """chosen / default in each round both measured: the speedup, round by round."""
    return tuple(
        a.samples_per_s / b.samples_per_s
        for a, b in zip(chosen.measurements, default.measurements, strict=False)
        if a is not None and b is not None and b.samples_per_s > 0
    )


def beats_default(chosen: Rounds, default: Rounds, band: float) -> bool:
    """Whether ``chosen`` is faster than ``default`` beyond the noise: its speedup (the
    median of :func:`paired_ratios`) above 1 + ``band``, and faster in every round
    (:func:`beats_every_round`)."""
    ratios = paired_ratios(chosen, default)
    return beats_every_round(chosen, default) and statistics.median(ratios) > 1.0 + band


def beats_every_round(chosen: Rounds, default: Rounds) -> bool:
    """Whether ``chosen`` was faster than ``default`` in every round that measured both
    (and there was one): the lowest per-round speedup is above 1."""
    ratios = paired_ratios(chosen, default)
    return bool(ratios) and min(ratios) > 1.0
