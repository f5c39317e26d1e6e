"""The early answer: the default loader kept in two rounds when it already trains within
the tolerance of the highest compute ceiling, with a stand-in backend; and measured not
at all when the bounds or the preflight say it cannot be."""

from __future__ import annotations

from typing import Any

from test_confirm import DEFAULT, Recorded, SetFigures, plan, result_of

from autotune import SearchResult, Settings
from autotune.decide import near_ceiling
from autotune.explore import Bounds, compute_key

FAST = Settings(batch_size=128, amp="bf16")
"""A combination of the space faster than the default's."""

LOADS_FAST = {"first_batch_s": 0.001, "batch_samples": 32, "torch_threads": 2}
"""A preflight whose first batch loaded at 32,000 samples/s."""


def bounds(default_ceiling: float, highest: float) -> Bounds:
    return Bounds(
        ceilings={compute_key(DEFAULT): default_ceiling, compute_key(FAST): highest},
        models={compute_key(DEFAULT): DEFAULT, compute_key(FAST): FAST},
    )


def answer(
    default_rate: float, ceilings: Bounds, info: dict[str, Any] = LOADS_FAST
) -> tuple[SetFigures, Recorded, Any]:
    backend = SetFigures(lambda s, r: default_rate * (1.0, 1.01)[r])
    progress = Recorded()
    found = near_ceiling(backend, plan(bounds=ceilings), DEFAULT, info, progress)
    return backend, progress, found


def test_a_default_at_the_highest_ceiling_is_the_answer_in_two_rounds() -> None:
    backend, progress, found = answer(990.0, bounds(1000.0, 1010.0))
    assert found is not None and found.is_default and found.confirmed
    assert found.winner.settings == DEFAULT and found.rounds == 2
    assert backend.orders == [[DEFAULT.key()]] * 2
    assert found.rates_spread is not None and found.rates_spread.degrees == 1
    assert [name for name, _ in progress.phases] == ["early"]
    assert any("so it is the answer" in m for m in progress.messages)
    assert found.at_ceiling == 1010.0
    text = SearchResult.from_dict(result_of(found).to_dict()).default_text()
    assert "within 3% of the model's highest compute ceiling (1,010 samples/s" in text


def test_a_default_whose_own_ceiling_is_far_below_the_highest_is_not_measured() -> None:
    # AMP at a larger batch trains twice as fast: the loader settings can win.
    backend, progress, found = answer(990.0, bounds(1000.0, 2000.0))
    assert found is None and backend.rounds == 0 and progress.phases == []


def test_a_first_batch_that_loaded_slower_than_the_ceiling_is_not_measured() -> None:
    slow = {**LOADS_FAST, "first_batch_s": 0.1}  # 320 samples/s
    backend, _, found = answer(990.0, bounds(1000.0, 1010.0), slow)
    assert found is None and backend.rounds == 0


def test_a_default_that_reads_below_the_ceiling_leaves_the_search_to_run() -> None:
    backend, progress, found = answer(800.0, bounds(1000.0, 1010.0))
    assert found is None and backend.rounds == 2
    assert any("searching" in m for m in progress.messages)


def test_the_default_threads_find_the_ceiling_of_a_space_fitted_to_one_thread() -> None:
    one = Settings(batch_size=32, threads=1)
    fitted = Bounds(ceilings={compute_key(one): 1000.0}, models={compute_key(one): one})
    _, _, found = answer(990.0, fitted)
    assert found is not None and found.is_default


def test_without_bounds_there_is_no_early_answer() -> None:
    backend = SetFigures(lambda s, r: 1000.0)
    assert near_ceiling(backend, plan(), DEFAULT, LOADS_FAST, Recorded()) is None
    assert backend.rounds == 0
