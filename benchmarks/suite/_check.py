"""One workload, end to end: ceilings, strategies, interleaved re-measurement, verdicts.

The result is one section of the results file, JSON types only: every figure
the tables and verdicts are made of, every probe of the oracle's grid, and
every trial of autotune's search, so a surprising verdict can be traced.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from autotune import Machine, Settings
from autotune.progress._progress import outcome
from autotune.settings._settings import AmpMode
from autotune.space._space import Space, build_space
from autotune.study import TrialRecord
from autotune.workload._workload import load_config
from benchmarks.common._verdicts import CLEAR_MARGIN, judge, shared_cpu_limit
from benchmarks.common._workloads import BenchWorkload, Profile
from benchmarks.suite._compare import Entry, interleave, measure_entry, median, spread
from benchmarks.suite._harness import Harness, Measured
from benchmarks.suite._strategies import (
    STRATEGIES,
    Choice,
    autotune_search,
    defaults,
    fastest,
    greedy_sweep,
    loader_configs,
    loader_only,
    oracle,
    rule_of_thumb,
)

Say = Callable[[str], None]


class _SearchProgress:
    """autotune's progress events as benchmark progress lines."""

    def __init__(self, say: Say) -> None:
        self.say = say

    def phase(self, name: str, detail: str) -> None:
        self.say(f"autotune {name}: {detail}")

    def plan(self, stage: str, trials: int, timeout: float | None, *, later: int = 0) -> None:
        pass

    def trial_started(self, number: int, role: str, settings: Settings) -> None:
        pass

    def window(self, number: int, window: Any, value: float) -> None:
        pass

    def trial_finished(self, record: TrialRecord, best: TrialRecord | None) -> None:
        what = record.settings.describe() if record.settings else "-"
        self.say(f"autotune #{record.number} {record.role} {what}: {outcome(record)}")

    def message(self, text: str) -> None:
        self.say(f"autotune: {text}")


def compute_configs(grid: Space) -> list[Settings]:
    """Configs for the compute ceiling: every batch size, thread count and AMP mode of
    the grid (the loader does not matter: batches are held in memory)."""
    return [
        Settings(
            batch_size=cast(int, batch),
            threads=threads if isinstance(threads, int) else None,
            amp=cast(AmpMode, amp),
        )
        for batch in grid.batch_size.values()
        for threads in grid.threads.values()
        for amp in grid.amp.values()
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Ceilings:
    compute: list[Measured]
    data: list[Measured]

    @property
    def best_compute(self) -> Measured:
        return fastest(self.compute)

    @property
    def best_data(self) -> Measured:
        return fastest(self.data)


def run_workload(
    workload: BenchWorkload, profile: Profile, machine: Machine, seed: int, say: Say
) -> dict[str, Any]:
    """Benchmark one workload; returns its section of the results."""
    began = time.perf_counter()
    loaded = load_config(workload.config)
    batch = loaded.workload.batch_size
    device = loaded.workload.device or machine.accelerator
    grid_space = workload.grid(profile, machine)
    grid = build_space({**loaded.space, **grid_space}, machine, batch)

    def listener(label: str, measured: Measured) -> None:
        figure = (
            f"FAILED: {measured.failure}"
            if measured.failure
            else f"{measured.samples_per_s:,.0f} samples/s"
        )
        say(f"{label}: {measured.settings.describe()} [{measured.mode}] {figure}")

    def harness_for(config: Path) -> Harness:
        return Harness(config, device=device, profile=profile, seed=seed, listener=listener)

    harness = harness_for(workload.config)
    say(f"preparing: the data and one training step ({grid.size()} configs in the grid)")
    info = harness.check(Settings(batch_size=batch))
    ceilings = _Ceilings(
        compute=[harness.measure(s, "compute", "compute ceiling") for s in compute_configs(grid)],
        data=[
            harness.measure(s, "data", "data ceiling")
            for s in loader_configs(grid, [cast(int, b) for b in grid.batch_size.values()])
        ],
    )
    choices = _choose(workload, grid, grid_space, harness, ceilings, machine, batch, seed, say)
    choices["oracle"], grid_measured = oracle(harness, grid)

    entries = [
        Entry(label=name, settings=choices[name].settings, mode="train", harness=harness)
        for name in STRATEGIES
    ]
    entries.append(
        Entry(
            label="compute ceiling",
            settings=ceilings.best_compute.settings,
            mode="compute",
            harness=harness,
        )
    )
    entries.append(
        Entry(
            label="data ceiling", settings=ceilings.best_data.settings, mode="data", harness=harness
        )
    )
    for reference in workload.references:
        other = harness_for(reference.config)
        other.check(Settings(batch_size=batch))
        oracle_settings = choices["oracle"].settings
        entries.append(
            Entry(label=reference.label, settings=oracle_settings, mode="train", harness=other)
        )
    say(f"final: {profile.rounds} interleaved rounds")
    rounds = interleave(entries, profile.rounds, measure_entry)
    by_label = {entry.label: rounds[entry.key()] for entry in entries}
    medians = {label: median(values) for label, values in by_label.items()}
    ceiling = min(medians["compute ceiling"], medians["data ceiling"])
    shared = shared_cpu_limit(
        [m.to_dict() for m in ceilings.compute], [m.to_dict() for m in ceilings.data]
    )

    verdicts = judge(
        {name: medians[name] for name in STRATEGIES},
        {name: choices[name].search_s for name in STRATEGIES},
        ceiling,
        must_beat_baselines=workload.must_beat_baselines,
        shared=shared.samples_per_s if shared else None,
    )
    for verdict in verdicts:
        say(verdict.line())
    return {
        "name": workload.name,
        "config": _relative(workload.config),
        "summary": workload.summary,
        "batch_size": batch,
        "device": device,
        "workload": info,
        "grid": {"space": grid_space, "size": grid.size(), "knobs": grid.describe()},
        "strategies": _rows(choices, by_label, medians, ceiling),
        "ceilings": {
            "compute": _ceiling(
                ceilings.best_compute, by_label["compute ceiling"], ceilings.compute
            ),
            "data": _ceiling(ceilings.best_data, by_label["data ceiling"], ceilings.data),
            "min": ceiling,
            "shared_cpu": shared.to_dict() if shared else None,
        },
        "references": [
            {
                "label": reference.label,
                "config": _relative(reference.config),
                "note": reference.note,
                "settings": choices["oracle"].settings.to_dict(),
                "samples_per_s": medians[reference.label],
                "rounds": by_label[reference.label],
                "of_ceiling": _ratio(medians[reference.label], ceiling),
                "vs_oracle": _ratio(medians[reference.label], medians["oracle"]),
            }
            for reference in workload.references
        ],
        "oracle_grid": [m.to_dict() for m in sorted(grid_measured, key=lambda m: -m.samples_per_s)],
        "analysis": _analysis(choices, grid_measured),
        "verdicts": [v.to_dict() for v in verdicts],
        "must_beat_baselines": workload.must_beat_baselines,
        "probes": harness.probes,
        "wall_s": time.perf_counter() - began,
    }


def _choose(
    workload: BenchWorkload,
    grid: Space,
    grid_space: dict[str, Any],
    harness: Harness,
    ceilings: _Ceilings,
    machine: Machine,
    batch: int,
    seed: int,
    say: Say,
) -> dict[str, Choice]:
    """Every strategy but the oracle: its choice and its search's cost."""
    workers = [cast(int, w) for w in grid.num_workers.values()]
    profile_options = harness.profile.search_options()
    if len(machine.gpus) > 1:
        # Every other strategy trains one process on one device; so does autotune here
        # (with several GPUs it would tune DDP ranks, another comparison).
        profile_options["gpus"] = 0
    return {
        "defaults": defaults(batch),
        "rule of thumb": rule_of_thumb(batch, machine),
        "greedy sweep": greedy_sweep(harness, batch, workers),
        "loader-only": loader_only(ceilings.data, batch),
        "autotune": autotune_search(
            workload.config, grid_space, seed, profile_options, _SearchProgress(say)
        ),
    }


def _rows(
    choices: dict[str, Choice],
    by_label: dict[str, list[float]],
    medians: dict[str, float],
    ceiling: float,
) -> list[dict[str, Any]]:
    """One row per strategy: its choice, its interleaved figures, its ratios and costs."""
    return [
        {
            "strategy": name,
            "settings": choices[name].settings.to_dict(),
            "describe": choices[name].settings.describe(),
            "samples_per_s": medians[name],
            "rounds": by_label[name],
            "round_spread": spread(by_label[name]),
            "vs_oracle": _ratio(medians[name], medians["oracle"]),
            "vs_defaults": _ratio(medians[name], medians["defaults"]),
            "of_ceiling": _ratio(medians[name], ceiling),
            "search_s": choices[name].search_s,
            "search_vs_oracle": _ratio(choices[name].search_s, choices["oracle"].search_s),
            "probes": choices[name].probes,
            "detail": choices[name].detail,
        }
        for name in STRATEGIES
    ]


def _relative(config: Path) -> str:
    """A config's path from the repository's root (benchmarks/workloads/NAME.py)."""
    return config.relative_to(config.parents[2]).as_posix()


def _ceiling(best: Measured, rounds: list[float], sweep: list[Measured]) -> dict[str, Any]:
    return {
        "settings": best.settings.to_dict(),
        "describe": best.settings.describe(),
        "samples_per_s": median(rounds),
        "rounds": rounds,
        "sweep": [m.to_dict() for m in sweep],
    }


def _analysis(choices: dict[str, Choice], grid: list[Measured]) -> dict[str, Any]:
    """How autotune's search relates to the grid: did it see the oracle's best, where
    does its choice rank, how many configs are near the best."""
    ranked = sorted(grid, key=lambda m: -m.samples_per_s)
    keys = [m.settings.key() for m in ranked]
    best = ranked[0].samples_per_s if ranked else 0.0
    ours = choices["autotune"].settings.key()
    trials = choices["autotune"].detail.get("trials", [])
    explored = {
        Settings.from_dict(t["settings"]).key()
        for t in trials
        if t["role"] == "explore" and t["settings"] is not None and t["duplicate_of"] is None
    }
    return {
        "autotune_choice_grid_rank": keys.index(ours) + 1 if ours in keys else None,
        "autotune_choice_grid_figure": ranked[keys.index(ours)].samples_per_s
        if ours in keys
        else None,
        "grid_best": best,
        "grid_configs_within_tolerance": sum(
            m.samples_per_s >= best * (1 - CLEAR_MARGIN) for m in ranked
        ),
        "autotune_explored_configs": len(explored),
        "autotune_explored_oracle_best": keys[0] in explored if keys else False,
        "autotune_explored_within_tolerance": sum(
            1
            for m in ranked
            if m.samples_per_s >= best * (1 - CLEAR_MARGIN) and m.settings.key() in explored
        ),
        "autotune_pruned": sum(1 for t in trials if t["state"] == "PRUNED"),
        "autotune_failed": sum(1 for t in trials if t["state"] == "FAIL"),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
