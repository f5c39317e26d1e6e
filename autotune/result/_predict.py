"""What a figure measured in a few rounds lets a user expect of the next measurement: a
95% prediction interval.

The range of the rounds is not that. A fourth measurement of the same config lies
between the lowest and the highest of three earlier ones with probability 1/2 (of
n + 1 exchangeable draws, the new one is the lowest or the highest with probability
2 / (n + 1)).

The interval is Student's prediction interval on the logarithm of the figures
(throughputs and their ratios vary by a factor, not by an amount, and stay positive):
``mean +/- t(0.975, n - 1) * sd * sqrt(1 + 1/n)``, mapped back. With 3 rounds the
t factor is 4.30, so 3 rounds that disagree give a wide interval: that is what 3
rounds tell. More rounds (``--rounds``) narrow it.

Three rounds of one config also estimate its spread poorly: three that happen to agree
give a narrow interval that the next measurement misses. Every config of the confirming
rounds is measured on the same machine in the same rounds, so the spread of the
samples/s interval is pooled over all of them (:func:`pooled_log_spread`): the deviations of
each config's logarithms from their own mean, over the degrees of freedom of all configs
together (with 6 configs in 3 rounds, 12 instead of 2, and a t factor of 2.18 instead of
4.30). How these intervals held against a plain loop: ``docs/decisions.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from autotune._noise import LogSpread, pooled_log_spread

LEVEL = 0.95
"""The probability the interval is built to hold the next measurement."""

_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""Student's t quantile at 0.975 for 1 to 30 degrees of freedom (the standard table,
three decimals)."""
_Z_975 = 1.960
"""The normal quantile at 0.975: the t quantile's limit, used beyond 30 degrees."""


def t_quantile(degrees: int) -> float:
    """Student's t at 0.975 for ``degrees`` degrees of freedom (>= 1); the normal
    quantile above 30, where the two differ by less than 5%.

    Raises:
        ValueError: fewer than 1 degree of freedom.
    """
    if degrees < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {degrees}")
    return _T_975[degrees - 1] if degrees <= len(_T_975) else _Z_975


def prediction_interval(
    values: Sequence[float], spread: LogSpread | None = None
) -> tuple[float, float] | None:
    """Where the next measurement of the same figure lies with probability ``LEVEL``,
    from ``values`` measured alike: Student's prediction interval on their logarithms,
    centred on their mean, with ``spread`` (pooled over configs measured alongside, see
    :func:`pooled_log_spread`) or else the values' own.

    None for fewer than 2 values (1 with a spread) or any value that is not positive (no
    spread to estimate, or no logarithm).
    """
    if not values or any(v <= 0 for v in values):
        return None
    if spread is None:
        spread = pooled_log_spread([values])  # the values' own: None for a single one
        if spread is None:
            return None
    logs = [math.log(v) for v in values]
    n = len(logs)
    centre = statistics.fmean(logs)
    half = t_quantile(spread.degrees) * spread.sd * math.sqrt(1 + 1 / n)
    return math.exp(centre - half), math.exp(centre + half)
