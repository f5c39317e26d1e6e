"""Bounds: compute ceilings measured first skip hopeless configs and end exploring early."""

from __future__ import annotations

import os

import optuna
import workloads
from conftest import quick

import autotune
from autotune import Settings
from autotune.explore._bounds import COMPUTE_CEILINGS, Bounds, compute_configs, compute_key
from autotune.study._study import records


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
    from autotune.machine._machine import Machine
    from autotune.space._space import build_space

    machine = Machine(
        cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu", cpu_bf16=True
    )
    space = build_space({"batch_size": [8, 16]}, machine, batch_size=8)
    configs = compute_configs(space)
    assert len(configs) == 2 * 2 * 2  # batch x amp (off, bf16) x threads (1, 2)
    assert all(c.num_workers == 0 for c in configs)
    assert len({compute_key(c) for c in configs}) == len(configs)


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
    autotune.search(**kwargs, **options, progress=watcher)
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
    from autotune.machine._machine import Machine
    from autotune.space._space import build_space

    machine = Machine(
        cpus=2, cpu_model="t", memory_bytes=2**33, shm_bytes=2**30, accelerator="cpu", cpu_bf16=True
    )
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
