"""Bounds: compute ceilings measured first skip hopeless configs and end exploring early."""

from __future__ import annotations

import os

import optuna
import workloads
from conftest import quick
from machines import TWO_CPUS

import autotune
from autotune import Settings
from autotune.explore import _bounds
from autotune.explore._bounds import (
    COMPUTE_CEILINGS,
    COMPUTE_READINGS,
    OUT_OF_REACH,
    READINGS,
    Bounds,
    compute_configs,
    compute_key,
    measure_bounds,
)
from autotune.probe import Failure, Figures, ProbeRequest, ProbeResult, Window, WorkloadSource
from autotune.space import build_space
from autotune.study import records


def figures_of(rate: float) -> Figures:
    """A reading of ``rate`` samples/s."""
    samples = int(rate)
    return Figures(
        windows=(
            Window(index=0, seconds=1.0, samples=samples, fresh=samples, steps=1, wait_seconds=0.0),
        )
    )


class Readings(autotune.QuietProgress):
    """Stands in for the compute probes: each pass is one probe of its combinations in
    turns, and each combination reads the next rate given for its thread count, or for
    its :func:`compute_key` (0 for a failed one); the order of the readings is kept, and
    each pass's combinations."""

    def __init__(self, rates: dict[int, list[float]] | dict[str, list[float]]) -> None:
        self.rates: dict[object, list[float]] = {k: list(values) for k, values in rates.items()}
        self.probed: list[str] = []
        self.passes: list[list[str]] = []
        self.messages: list[str] = []

    def probe(self, request: ProbeRequest) -> ProbeResult:
        assert request.mode == "compute" and request.turns
        assert request.settings == request.turns[0]
        self.passes.append([compute_key(settings) for settings in request.turns])
        return ProbeResult(figures=Figures(), turns=tuple(map(self._read, request.turns)))

    def _read(self, settings: Settings) -> ProbeResult:
        assert settings.num_workers == 0
        key = compute_key(settings)
        self.probed.append(key)
        rate = self.rates[key if key in self.rates else settings.threads or 0].pop(0)
        if rate == 0:
            return ProbeResult(
                figures=Figures(), failure=Failure(kind="crash", message="it crashed")
            )
        return ProbeResult(figures=figures_of(rate))

    def message(self, text: str) -> None:
        self.messages.append(text)


def test_a_config_whose_ceiling_cannot_reach_the_band_is_ruled_out() -> None:
    small, large = Settings(batch_size=4), Settings(batch_size=64)
    bounds = Bounds({compute_key(small): 400.0, compute_key(large): 6400.0})
    assert bounds.rules_out(small, best=6000.0, tolerance=0.03) is not None
    assert "400 samples/s with batch=4" in bounds.rules_out(small, 6000.0, 0.03)
    assert bounds.rules_out(large, best=6000.0, tolerance=0.03) is None
    # Within the noise margin of the band: not ruled out.
    assert bounds.rules_out(small, best=420.0, tolerance=0.03) is None
    # Nothing measured yet, or a combination with no ceiling: nothing to rule out.
    assert bounds.rules_out(small, best=None, tolerance=0.03) is None
    assert bounds.rules_out(Settings(batch_size=8), best=6000.0, tolerance=0.03) is None


def test_saturation_is_the_finalist_band_of_the_highest_ceiling() -> None:
    bounds = Bounds({"a": 1000.0, "b": 500.0})
    assert bounds.saturated(950.0, tolerance=0.03)
    assert not bounds.saturated(930.0, tolerance=0.03)
    assert not bounds.saturated(None, tolerance=0.03)
    assert not Bounds({}).saturated(1000.0, tolerance=0.03)


def test_compute_configs_cover_each_combination_once() -> None:
    space = build_space({"batch_size": [8, 16]}, TWO_CPUS, batch_size=8)
    configs = compute_configs(space)
    assert len(configs) == 2 * 2 * 2  # batch x amp (off, bf16) x threads (1, 2)
    assert all(c.num_workers == 0 for c in configs)
    assert len({compute_key(c) for c in configs}) == len(configs)


def _measure(
    readings: Readings, study: optuna.Study, monkeypatch, batch_sizes: tuple[int, ...] = (64,)
) -> Bounds | None:
    monkeypatch.setattr(_bounds, "run_probe", readings.probe)
    space = build_space({"batch_size": list(batch_sizes), "amp": "off"}, TWO_CPUS, batch_size=64)
    template = ProbeRequest(
        source=WorkloadSource(config_path="config.py"),
        settings=Settings(batch_size=64),
        device="cpu",
    )
    bounds, _figures = measure_bounds(template, space, study, readings)
    return bounds


def test_each_ceiling_is_the_highest_of_readings_in_two_probe_processes(monkeypatch) -> None:
    # Two threads read low in the first probe, as one probe process in several does:
    # alone, that reading would rule out every two-thread config below the band of 2,200.
    readings = Readings({1: [2200.0, 2150.0], 2: [1900.0, 2700.0]})
    study = optuna.create_study()
    bounds = _measure(readings, study, monkeypatch)
    one, two = "batch=64 amp=off threads=1", "batch=64 amp=off threads=2"
    # A pass over every combination in one process, then another in a new one.
    assert READINGS == 2 and readings.passes == [[one, two], [one, two]]
    assert bounds is not None and bounds.ceilings == {one: 2200.0, two: 2700.0}
    assert bounds.rules_out(Settings(batch_size=64, threads=2), best=2200.0, tolerance=0.03) is None
    assert not bounds.saturated(2200.0, tolerance=0.03)  # two threads may do better
    assert study.user_attrs[COMPUTE_READINGS] == {one: [2200.0, 2150.0], two: [1900.0, 2700.0]}
    assert study.user_attrs[COMPUTE_CEILINGS][two]["samples_per_s"] == 2700.0
    assert f"compute ceiling, {two}: 2,700 samples/s (the highest of 1,900, 2,700)" in (
        readings.messages
    )
    # Resumed: nothing read again.
    again = Readings({1: [], 2: []})
    assert _measure(again, study, monkeypatch) == bounds and again.probed == []


def test_a_combination_far_below_the_highest_and_near_its_neighbours_is_read_once(
    monkeypatch,
) -> None:
    # Batch 8 on two threads first reads 0.5 of the highest, batch 64 on one thread, but
    # 0.8 of batch 8 on one thread and of batch 64 on two, the combinations one knob
    # away: slow for what it is, and no second probe for it.
    small_one, small_two = "batch=8 amp=off threads=1", "batch=8 amp=off threads=2"
    large_one, large_two = "batch=64 amp=off threads=1", "batch=64 amp=off threads=2"
    rates = {
        small_one: [1250.0, 1250.0],
        small_two: [1000.0, 1900.0],
        large_one: [2000.0, 2100.0],
        large_two: [1250.0, 1250.0],
    }
    readings = Readings(rates)
    study = optuna.create_study()
    bounds = _measure(readings, study, monkeypatch, batch_sizes=(8, 64))
    assert OUT_OF_REACH == 0.6
    first_pass = [small_one, small_two, large_one, large_two]
    assert readings.probed == [*first_pass, small_one, large_one, large_two]
    assert bounds is not None and bounds.ceilings[small_two] == 1000.0
    assert study.user_attrs[COMPUTE_READINGS][small_two] == [1000.0]
    assert any("1 combination(s) read below 60% of the highest" in m for m in readings.messages)
    # At 0.65 of the highest, within reach of a low reading: read twice.
    closer = Readings({**rates, small_two: [1300.0, 1900.0]})
    assert _measure(closer, optuna.create_study(), monkeypatch, batch_sizes=(8, 64)) is not None
    assert closer.probed.count(small_two) == 2


def test_a_combination_far_below_a_neighbour_is_read_again(monkeypatch) -> None:
    # Two threads first read at 0.55 of one thread at the same batch size and AMP: one
    # knob rarely costs that much, and one probe process read a combination at a quarter
    # of its neighbours', so it is read again, and its second reading counts.
    readings = Readings({1: [2000.0, 2100.0], 2: [1100.0, 1900.0]})
    study = optuna.create_study()
    bounds = _measure(readings, study, monkeypatch)
    one, two = "batch=64 amp=off threads=1", "batch=64 amp=off threads=2"
    assert readings.probed == [one, two, one, two]
    assert bounds is not None and bounds.ceilings == {one: 2100.0, two: 1900.0}
    assert bounds.rules_out(Settings(batch_size=64, threads=2), best=1950.0, tolerance=0.03) is None
    assert study.user_attrs[COMPUTE_READINGS] == {one: [2000.0, 2100.0], two: [1100.0, 1900.0]}
    assert not any("not read again" in m for m in readings.messages)


def test_a_failed_reading_keeps_the_others_and_an_older_study_gets_its_second(monkeypatch) -> None:
    one, two = "batch=64 amp=off threads=1", "batch=64 amp=off threads=2"
    readings = Readings({1: [0.0, 2100.0], 2: [2600.0, 0.0]})
    study = optuna.create_study()
    bounds = _measure(readings, study, monkeypatch)
    assert bounds is not None and bounds.ceilings == {one: 2100.0, two: 2600.0}
    assert study.user_attrs[COMPUTE_READINGS] == {one: [2100.0], two: [2600.0]}
    # A resumed search reads each once more, up to READINGS.
    more = Readings({1: [2300.0], 2: [2500.0]})
    bounds = _measure(more, study, monkeypatch)
    assert more.probed == [one, two]
    assert bounds is not None and bounds.ceilings == {one: 2300.0, two: 2600.0}
    # A study written before readings were counted holds one reading of each.
    older = optuna.create_study()
    older.set_user_attr(COMPUTE_CEILINGS, {one: figures_of(2000.0).to_dict()})
    second = Readings({1: [2400.0], 2: [2500.0, 2550.0]})
    bounds = _measure(second, older, monkeypatch)
    assert second.probed == [two, one, two]  # its first pass only reads what it lacks
    assert older.user_attrs[COMPUTE_READINGS] == {one: [2000.0, 2400.0], two: [2500.0, 2550.0]}


def test_a_search_skips_what_cannot_win_and_stops_near_the_ceiling(workdir) -> None:
    # Every forward takes 30 ms whatever the batch: batch 64 trains 16x faster than batch 4,
    # and the data is instant, so the best config reaches the model's ceiling at once.
    result = autotune.search(
        dataset=workloads.instant_dataset,
        model=workloads.steady_model,
        batch_size=64,
        space={"batch_size": [4, 64], "threads": 1, "amp": "off", "num_workers": [0, 1, 2]},
        # A wide tolerance: "near the ceiling" then holds on a busy machine too.
        **quick(trials=20, seed=0, bounds=True, window_seconds=0.2, tolerance=0.1),
    )
    assert result.settings.batch_size == 64
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    ceilings = study.user_attrs[COMPUTE_CEILINGS]
    assert set(ceilings) == {"batch=4 amp=off threads=1", "batch=64 amp=off threads=1"}
    fast = ceilings["batch=64 amp=off threads=1"]["samples_per_s"]
    slow = ceilings["batch=4 amp=off threads=1"]["samples_per_s"]
    assert 8 * slow < fast  # about 16x, less the step's own time
    explored = [r for r in records(study) if r.role == "explore"]
    assert len(explored) < 20  # stopped early: the best is at the ceiling
    bounded = [r for r in explored if r.bounded is not None]
    probed_small = [r for r in explored if r.settings.batch_size == 4 and r.figures]
    assert all(r.settings.batch_size == 4 for r in bounded)
    assert all(r.state == "PRUNED" and r.figures is None for r in bounded)
    assert len(probed_small) <= 1  # at most one batch-4 config ran before the best was known
    assert bounded or not probed_small  # a batch-4 proposal after that was ruled out unrun


def test_a_resumed_search_reuses_the_ceilings(workdir) -> None:
    options = quick(trials=3, seed=0, bounds=True)
    space = {"batch_size": [4, 64], "threads": 1, "amp": "off", "num_workers": [0, 1]}
    kwargs = {
        "dataset": workloads.instant_dataset,
        "model": workloads.steady_model,
        "batch_size": 64,
        "space": space,
    }
    autotune.search(**kwargs, **options)
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    first = study.user_attrs[COMPUTE_CEILINGS]

    class Phases(autotune.QuietProgress):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def phase(self, name: str, detail: str) -> None:
            self.seen.append(name)

    watcher = Phases()
    autotune.search(**kwargs, **options, resume=True, progress=watcher)
    assert "bounds" not in watcher.seen and "explore" in watcher.seen
    assert study.user_attrs[COMPUTE_CEILINGS] == first


def test_the_default_loader_reuses_the_compute_ceiling_the_bounds_measured(workdir) -> None:
    # A probe with no thread setting runs a thread per CPU of its share: the default
    # loader's compute ceiling is then the one the bounds measured with that many.
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    result = autotune.search(
        dataset=workloads.instant_dataset,
        model=workloads.steady_model,
        batch_size=64,
        space={"batch_size": [64], "threads": threads, "amp": "off", "num_workers": [0, 1]},
        **quick(trials=2, seed=0, bounds=True, ceilings=True),
    )
    assert result.workload["torch_threads"] == threads
    study = optuna.load_study(study_name="workload", storage="sqlite:///studies/workload.db")
    bounds = study.user_attrs[COMPUTE_CEILINGS]
    assert set(bounds) == {f"batch=64 amp=off threads={threads}"}
    measured = bounds[f"batch=64 amp=off threads={threads}"]["samples_per_s"]
    assert result.baseline_ceilings["compute"].samples_per_s == measured


def test_a_leader_at_the_models_ceiling_is_confirmed_beside_its_loader_without_workers() -> None:
    from autotune.decide._choose import Candidate
    from autotune.decide._confirm import without_workers

    machine = TWO_CPUS
    fixed = {"batch_size": [64], "threads": 2, "amp": "off"}
    space = build_space({**fixed, "num_workers": [0, 1, 2]}, machine, batch_size=64)
    leader = Settings(
        batch_size=64, num_workers=1, prefetch_factor=4, persistent_workers=True, threads=2
    )
    bounds = Bounds({compute_key(leader): 1000.0})
    at_ceiling = Candidate(leader, 950.0)  # within twice the tolerance (6%) of 1,000
    lighter = without_workers(at_ceiling, bounds, space, tolerance=0.03)
    assert lighter == Settings(batch_size=64, threads=2)
    # Below the band the loader may be what it waits on: nothing added.
    assert without_workers(Candidate(leader, 900.0), bounds, space, tolerance=0.03) is None
    # No bounds, no workers to drop, or a space without 0 workers: nothing added.
    assert without_workers(at_ceiling, None, space, tolerance=0.03) is None
    assert without_workers(Candidate(lighter, 990.0), bounds, space, 0.03) is None
    no_zero = build_space({**fixed, "num_workers": [1, 2]}, machine, batch_size=64)
    assert without_workers(at_ceiling, bounds, no_zero, tolerance=0.03) is None
