"""The noise helpers: each variant's figures on fixed inputs, pinned to the values the
search has always printed and decided with, through the callers and the helpers alike."""

from __future__ import annotations

import pytest

from autotune._noise import (
    difference_error,
    half_range,
    pooled_log_spread,
    relative_range,
    window_spread,
)
from autotune.decide._ddp import _noise as ddp_noise
from autotune.inloop._climb import noise as climb_noise
from autotune.probe import Figures, Window
from autotune.result._predict import prediction_interval
from benchmarks.common._checker import spread as checker_spread
from benchmarks.suite._compare import spread as suite_spread


def figures(*rates: float) -> Figures:
    return Figures(
        windows=tuple(
            Window(
                index=i,
                seconds=0.5,
                samples=int(rate * 0.5),
                fresh=int(rate * 0.5),
                steps=4,
                wait_seconds=0.1,
            )
            for i, rate in enumerate(rates)
        )
    )


A = figures(1000, 1100, 940, 1022)
B = figures(800, 812, 790)
ROUNDS = [[1400.0, 1320.0, 1510.0], [980.0, 1003.0, 1011.0], [5.0]]


def test_the_window_spread_of_a_probe_and_of_the_online_climb() -> None:
    assert A.window_spread == 0.06512923984077931
    assert B.window_spread == 0.013757461816701339
    assert figures(5).window_spread == 0.0 and figures().window_spread == 0.0
    assert window_spread([1000.0, 1100.0, 940.0, 1022.0]) == 0.06512923984077931
    assert window_spread([7.0]) == 0.0 and window_spread([0.0, 0.0]) == 0.0
    assert climb_noise([1000.0, 1100.0], [800.0, 812.0, 790.0], 0.03) == 0.06734350297014739
    assert climb_noise([1000.0], [800.0], 0.03) == 0.03


def test_the_rounds_half_range() -> None:
    assert half_range([1.31, 1.25, 1.4]) == 0.05725190839694653
    assert half_range([3.0]) is None and half_range([0.0, 0.0]) is None


def test_the_rounds_whole_range_is_twice_the_half_range() -> None:
    assert relative_range([1.31, 1.25, 1.4]) == 2 * 0.05725190839694653
    assert relative_range([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert relative_range([3.0]) is None and relative_range([0.0, 0.0]) is None


def test_the_benchmarks_spreads_are_the_noise_modules() -> None:
    """The checker's spread is the half range, the suite's the whole range (0 for none)."""
    for rates in ([1.31, 1.25, 1.4], [90.0, 100.0, 110.0], [7.0, 7.5]):
        assert checker_spread(rates) == half_range(rates)
        assert suite_spread(rates) == relative_range(rates)
    assert checker_spread([3.0]) == suite_spread([3.0]) == 0.0


def test_the_ddp_stages_standard_error_of_a_difference() -> None:
    assert ddp_noise(A, B) == 0.033519303728430434
    assert ddp_noise(figures(), figures()) == 0.0
    runs = [(A.window_spread, 4), (B.window_spread, 3)]
    assert difference_error(*runs) == 0.033519303728430434
    assert difference_error((0.1, 0)) == pytest.approx(0.1)  # no window counts as one


def test_the_predictions_pooled_log_spread_and_its_interval() -> None:
    spread = pooled_log_spread(ROUNDS)
    assert spread is not None
    assert (spread.sd, spread.degrees) == (0.04902267162112831, 4)
    assert pooled_log_spread([[5.0], [1.0, -1.0]]) is None
    assert prediction_interval(ROUNDS[0], spread) == (1203.1360817593925, 1647.420723172425)
    assert prediction_interval(ROUNDS[0]) == (1007.1403904887025, 1968.0188905194443)
    assert prediction_interval([1.0]) is None


@pytest.mark.parametrize("rates", [[1.0, 2.0, 4.0], [10.0, 10.0], [3.0, 5.0, 5.0, 9.0]])
def test_every_spread_is_scale_free(rates: list[float]) -> None:
    scaled = [rate * 7.5 for rate in rates]
    assert window_spread(scaled) == pytest.approx(window_spread(rates))
    assert half_range(scaled) == pytest.approx(half_range(rates))
    assert relative_range(scaled) == pytest.approx(relative_range(rates))
    pooled, own = pooled_log_spread([scaled]), pooled_log_spread([rates])
    assert pooled is not None and own is not None
    assert (pooled.sd, pooled.degrees) == (pytest.approx(own.sd), own.degrees)
