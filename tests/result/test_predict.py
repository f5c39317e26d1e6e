"""The prediction interval printed beside a figure measured in a few rounds: where the
next measurement of it lies with 95% probability."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune._noise import LogSpread, pooled_log_spread
from autotune.result._predict import LEVEL, prediction_interval, t_quantile


def test_the_t_quantile_is_students_and_the_normal_beyond_the_table() -> None:
    assert t_quantile(1) == 12.706
    assert t_quantile(2) == 4.303
    assert t_quantile(30) == 2.042
    assert t_quantile(31) == t_quantile(1000) == 1.960
    table = [t_quantile(d) for d in range(1, 32)]
    assert table == sorted(table, reverse=True)  # fewer degrees, wider
    with pytest.raises(ValueError, match="at least 1 degree"):
        t_quantile(0)


def test_the_t_table_matches_students_density_integrated() -> None:
    """Each entry of the table against the quantile of Student's density, integrated
    numerically (the cumulative trapezoid on a grid of 0.0001, from 0 to 15)."""
    x = np.linspace(0.0, 15.0, 150_001)
    for degrees in range(1, 31):
        scale = math.exp(math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2))
        density = (
            scale / math.sqrt(degrees * math.pi) * (1 + x**2 / degrees) ** (-(degrees + 1) / 2)
        )
        steps = (density[1:] + density[:-1]) / 2 * (x[1] - x[0])
        cdf = 0.5 + np.concatenate([[0.0], np.cumsum(steps)])
        quantile = float(np.interp(0.975, cdf, x))
        assert t_quantile(degrees) == pytest.approx(quantile, abs=0.0006), degrees


def test_the_interval_is_students_on_the_logarithms() -> None:
    # logs 1, 2, 3: mean 2, standard deviation 1, n 3
    low, high = prediction_interval([math.e, math.e**2, math.e**3]) or (0.0, 0.0)
    half = 4.303 * math.sqrt(1 + 1 / 3)
    assert math.log(low) == pytest.approx(2 - half)
    assert math.log(high) == pytest.approx(2 + half)


def test_no_interval_without_a_spread_to_estimate_or_a_logarithm() -> None:
    assert prediction_interval([]) is None
    assert prediction_interval([120.0]) is None  # one round: no spread
    assert prediction_interval([120.0, 0.0, 130.0]) is None  # a figure of 0
    assert prediction_interval([100.0, 100.0, 100.0]) == pytest.approx((100.0, 100.0))


def test_the_pooled_log_spread_sums_each_groups_deviations_from_its_own_mean() -> None:
    # logs 1, 2, 3 (mean 2: squares 2) and 5, 7 (mean 6: squares 2), over 2 + 1 degrees
    e = math.e
    spread = pooled_log_spread([[e, e**2, e**3], [e**5, e**7], [e**9], [e, 0.0]])
    assert spread == LogSpread(sd=pytest.approx(math.sqrt(4 / 3)), degrees=3)
    # A group shifted by a factor adds the same: each is taken about its own mean.
    assert pooled_log_spread([[e, e**2, e**3], [100 * e**5, 100 * e**7]]) == spread
    # A group that adds nothing does not end the pooling either, wherever it stands.
    assert pooled_log_spread([[e, 0.0], [e**9], [e, e**2, e**3], [e**5, e**7]]) == spread
    assert pooled_log_spread([[5.0], [7.0]]) is None
    assert pooled_log_spread([]) is None


def test_a_pooled_log_spread_sets_the_width_and_its_degrees_the_t_factor() -> None:
    spread = LogSpread(sd=0.5, degrees=10)
    low, high = prediction_interval([math.e, math.e**3], spread) or (0.0, 0.0)
    half = 2.228 * 0.5 * math.sqrt(1 + 1 / 2)
    assert math.log(low) == pytest.approx(2 - half)
    assert math.log(high) == pytest.approx(2 + half)
    # One round is enough with a spread from elsewhere; still no logarithm of 0.
    assert prediction_interval([100.0], spread) is not None
    assert prediction_interval([100.0, 0.0], spread) is None
    assert LogSpread.from_dict(spread.to_dict()) == spread


def test_more_rounds_of_the_same_spread_narrow_the_interval() -> None:
    widths = []
    for repeats in (1, 2, 4, 8):
        low, high = prediction_interval([90.0, 100.0, 110.0] * repeats) or (0.0, 0.0)
        assert low < 90.0 and high > 110.0
        widths.append(high / low)
    assert widths == sorted(widths, reverse=True) and widths[0] > 1.5 * widths[-1]


@given(
    st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=2, max_size=12),
    st.floats(min_value=1e-3, max_value=1e3),
)
def test_the_interval_scales_with_the_figures_and_holds_their_geometric_mean(
    values: list[float], scale: float
) -> None:
    low, high = prediction_interval(values) or (0.0, 0.0)
    scaled = prediction_interval([v * scale for v in values]) or (0.0, 0.0)
    assert scaled == pytest.approx((low * scale, high * scale), rel=1e-6)
    centre = math.exp(sum(math.log(v) for v in values) / len(values))
    assert low * (1 - 1e-9) <= centre <= high * (1 + 1e-9)


def test_the_next_measurement_lies_in_it_95_times_in_100_and_in_the_range_half_as_often() -> None:
    """The claim the printed interval makes, drawn: 3 rounds of a figure with 8% noise,
    then a fourth measurement of it."""
    draws = np.random.default_rng(7).lognormal(mean=7.0, sigma=0.08, size=(4000, 4))
    inside = in_range = 0
    for *rounds, following in draws:
        low, high = prediction_interval(rounds) or (0.0, 0.0)
        inside += low <= following <= high
        in_range += min(rounds) <= following <= max(rounds)
    assert abs(inside / len(draws) - LEVEL) <= 0.02  # LEVEL is 0.95
    assert 0.46 <= in_range / len(draws) <= 0.54
