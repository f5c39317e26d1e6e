"""Worker range: the loader alone measured with more workers than the default bound
widens the range only where loading waits on something other than the CPU."""

from __future__ import annotations

import optuna
import pytest
import workloads
from conftest import quick
from machines import TWO_CPUS

import autotune
from autotune._format import format_rate
from autotune.explore import Bounds, _worker_range, compute_key
from autotune.explore._worker_range import (
    GAIN,
    LOADER_BOUND,
    WORKER_RANGE,
    WorkerRange,
    sweep,
    sweepable,
)
from autotune.settings import Settings
from autotune.space import IntRange, build_space
from autotune.study import records


def rates(table: dict[int, float | None]):
    """A stand-in measurement: the rate of each worker count, and which were asked."""
    asked: list[int] = []

    def rate_of(count: int) -> float | None:
        asked.append(count)
        return table[count]

    return rate_of, asked


def test_a_loader_that_waits_doubles_until_it_feeds_the_model() -> None:
    # Each doubling doubles the rate (a loader waiting on a stream); the model trains 5,000.
    rate_of, asked = rates({8: 1000.0, 16: 2000.0, 32: 4000.0, 64: 8000.0})
    found = sweep(8, 5000.0, rate_of)
    assert asked == [8, 16, 32, 64]
    assert found.bound == 64 and found.widened() == 64
    # It stops once the loader outpaces the model, without measuring further.
    rate_of, asked = rates({8: 1000.0, 16: 2000.0, 32: 6000.0})
    found = sweep(8, 5000.0, rate_of)
    assert asked == [8, 16, 32] and found.bound == 32


def test_a_loader_bound_by_its_cpu_keeps_the_default_range() -> None:
    rate_of, asked = rates({8: 1000.0, 16: 1000.0 * GAIN * 0.99})
    found = sweep(8, 5000.0, rate_of)
    assert asked == [8, 16]
    assert found.bound == 8 and found.widened() is None
    assert "doubling them did not pay" in found.note(8)
    # Just enough gain moves the bound.
    rate_of, _ = rates({8: 1000.0, 16: 1000.0 * GAIN, 32: 1000.0 * GAIN})
    assert sweep(8, 5000.0, rate_of).bound == 16


def test_the_loaders_fastest_count_lies_within_the_bound() -> None:
    # tiny-model at fd98cac: 16 workers delivered more than 8, not enough to move the bound.
    rate_of, _ = rates({8: 860.0, 16: 988.0})
    found = sweep(8, 60_000.0, rate_of)
    assert found.bound == 8 and found.fastest() == 8
    rate_of, _ = rates({8: 1000.0, 16: 2000.0, 32: 1900.0})
    assert sweep(8, 60_000.0, rate_of).fastest() == 16
    rate_of, _ = rates({8: None})
    assert sweep(8, 60_000.0, rate_of).fastest() is None


def test_a_loader_already_faster_than_the_model_is_measured_once() -> None:
    rate_of, asked = rates({8: 6000.0})
    found = sweep(8, 5000.0, rate_of)
    assert asked == [8] and found.bound == 8
    assert "enough for the 5,000 samples/s the model trains" in found.note(8)


def test_a_failed_probe_stops_the_sweep_where_it_failed() -> None:
    rate_of, asked = rates({8: 1000.0, 16: 2000.0, 32: None})
    found = sweep(8, 5000.0, rate_of)
    assert asked == [8, 16, 32] and found.bound == 16
    rate_of, _ = rates({8: None})
    assert sweep(8, 5000.0, rate_of).bound == 8
    assert "could not be measured" in sweep(8, 5000.0, rate_of).note(8)


def test_the_sweep_stops_at_the_most_workers() -> None:
    rate_of, asked = rates({n: float(n) for n in (16, 32, 64, 128)})
    assert sweep(16, 1e9, rate_of).bound == _worker_range.MOST_WORKERS
    assert max(asked) == _worker_range.MOST_WORKERS


def test_the_note_says_why_the_range_moved_and_round_trips() -> None:
    found = WorkerRange({8: 1950.0, 16: 3900.0}, bound=16, ceiling=26000.0)
    note = found.note(8)
    assert note.startswith("num_workers: up to 16, not 8:")
    assert "1,950 with 8, 3,900 with 16 workers" in note
    assert WorkerRange.from_dict(found.to_dict()) == found


def ceilings(table: dict[tuple[int, int], float]) -> Bounds:
    """Bounds of (batch size, threads) -> the model's samples/s."""
    models = {compute_key(m): m for m in (Settings(batch_size=b, threads=t) for b, t in table)}
    rates = {compute_key(Settings(batch_size=b, threads=t)): r for (b, t), r in table.items()}
    return Bounds(rates, models)


def test_where_the_loader_bounds_the_training_the_search_leads_with_the_largest_batch() -> None:
    # cpu-decode at 71766cc, seed 1: the model alone within its noise across batch 16-64,
    # the loader alone at 858; the ceilings ranked the user's batch first.
    bounds = ceilings(
        {
            (16, 1): 3136.0,
            (16, 2): 3562.0,
            (32, 1): 3710.0,
            (32, 2): 3700.0,
            (64, 1): 3000.0,
            (64, 2): 3501.0,
        }
    )
    assert bounds.fastest_model() == Settings(batch_size=32, threads=1)
    found = WorkerRange({8: 858.0, 16: 828.0}, bound=8, ceiling=3710.0)
    # The largest batch, on the threads of its own highest ceiling.
    assert found.leading_model(bounds) == Settings(batch_size=64, threads=2)
    # Only the batch sizes whose ceiling is over 1/LOADER_BOUND times the loader's best
    # count: batch 64 (3,501 at best) is loader-bound for a loader of 1,750, not of 1,751.
    edge = 3501.0 * LOADER_BOUND
    assert WorkerRange({8: edge - 1}, 8, 3710.0).leading_model(bounds).batch_size == 64
    assert WorkerRange({8: edge + 1}, 8, 3710.0).leading_model(bounds).batch_size == 32
    # A loader faster than half of every ceiling: the fastest ceiling leads.
    assert WorkerRange({8: 1900.0}, 8, 3710.0).leading_model(bounds) == bounds.fastest_model()
    # Nothing measured of the loader, or of the model: as the ceilings say.
    assert WorkerRange({}, 8, 3710.0).leading_model(bounds) == bounds.fastest_model()
    assert found.leading_model(Bounds({})) is None


def test_only_a_default_range_with_a_ceiling_is_swept() -> None:
    space = build_space({}, TWO_CPUS, batch_size=32)
    bounds = Bounds({"k": 1000.0})
    assert space.num_workers == IntRange(0, 8)
    assert sweepable(space, {}, bounds)
    assert not sweepable(space, {}, None)
    assert not sweepable(space, {}, Bounds({}))
    given = build_space({"num_workers": {"low": 0, "high": 4}}, TWO_CPUS, batch_size=32)
    assert not sweepable(given, {"num_workers": {"low": 0, "high": 4}}, bounds)


def test_a_search_on_a_waiting_loader_widens_the_range_and_explores_it(
    workdir, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A default bound of 1 worker and at most 4: each item sleeps 5 ms (the CPU is free),
    # so 2 and 4 workers each double the loader's rate, far below the linear model's. At
    # 2 ms, beside two CPU-bound processes, 4 workers read only 1.23x 2 workers: the
    # loading's own CPU was no longer small beside the sleep.
    monkeypatch.setattr("autotune.space._space.MAX_DEFAULT_WORKERS", 1)
    monkeypatch.setattr(_worker_range, "MOST_WORKERS", 4)
    kwargs = {
        "dataset": workloads.waiting_dataset,
        "model": workloads.linear_model,
        "batch_size": 16,
        "space": {"batch_size": [16], "threads": 1, "amp": "off"},
    }
    seen: list[str] = []

    class Lines(autotune.QuietProgress):
        def message(self, text: str) -> None:
            seen.append(text)

    result = autotune.search(**kwargs, **quick(trials=3, seed=0, bounds=True), progress=Lines())
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    stored = WorkerRange.from_dict(study.user_attrs[WORKER_RANGE])
    assert sorted(stored.rates) == [1, 2, 4] and stored.bound == 4
    assert stored.rates[4] > 2.5 * stored.rates[1]
    assert result.space["num_workers"] == {"low": 0, "high": 4}
    assert any(n.startswith("num_workers: up to 4, not 1:") for n in result.space["notes"])
    assert [m for m in seen if m.startswith("loader alone")] == [
        f"loader alone, {n} workers: {format_rate(stored.rates[n])} samples/s" for n in (1, 2, 4)
    ]
    explored = [r.settings.num_workers for r in records(study) if r.role == "explore"]
    assert 4 in explored  # the widened region is measured, as a warm start
    # Resumed: the same range, not measured again.
    seen.clear()
    again = autotune.search(
        **kwargs, **quick(trials=1, seed=0, bounds=True, resume=True), progress=Lines()
    )
    assert not [m for m in seen if m.startswith("loader alone")]
    assert again.space["num_workers"] == {"low": 0, "high": 4}
