"""One workload, end to end: ceilings, strategies, interleaved re-measurement, verdicts.

The result is one section of the results file, JSON types only: every figure
the tables and verdicts are made of, every probe of the oracle's grid, and
every trial of autotune's search, so a surprising verdict can be traced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune import Machine, Settings
from autotune._progress import outcome
from autotune._settings import AmpMode
from autotune._space import Space, build_space
from autotune._study import TrialRecord
from autotune._workload import load_config
from benchmarks._compare import Entry, interleave, measure_entry, median, spread
from benchmarks._harness import Harness, Measured
from benchmarks._strategies import (
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
from benchmarks._verdicts import CLEAR_MARGIN, judge
from benchmarks._workloads import BenchWorkload, Profile

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
    configs = []
    for batch in grid.batch_size.values():
        for threads in grid.threads.values():
            for amp in grid.amp.values():
                assert isinstance(batch, int) and isinstance(amp, str)
                amp_mode: AmpMode = "bf16" if amp == "bf16" else "fp16" if amp == "fp16" else "off"
                configs.append(
                    Settings(
                        batch_size=batch,
                        threads=threads if isinstance(threads, int) else None,
                        amp=amp_mode,
                    )
                )
    return configs


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

    harness = Harness(workload.config, device=device, profile=profile, seed=seed, listener=listener)
    say(f"preparing: the data and one training step ({grid.size()} configs in the grid)")
    info = harness.check(Settings(batch_size=batch))

    compute_sweep = [
        harness.measure(s, "compute", "compute ceiling") for s in compute_configs(grid)
    ]
    batches = [b for b in grid.batch_size.values() if isinstance(b, int)]
    data_sweep = [harness.measure(s, "data", "data ceiling") for s in loader_configs(grid, batches)]
    best_compute, best_data = fastest(compute_sweep), fastest(data_sweep)

    workers = [w for w in grid.num_workers.values() if isinstance(w, int)]
    choices: dict[str, Choice] = {
        "defaults": defaults(batch),
        "rule of thumb": rule_of_thumb(batch, machine),
        "greedy sweep": greedy_sweep(harness, batch, workers),
        "loader-only": loader_only(data_sweep, batch),
        "autotune": autotune_search(
            workload.config, grid_space, seed, profile.search_options(), _SearchProgress(say)
        ),
    }
    choices["oracle"], grid_measured = oracle(harness, grid)

    entries = [
        Entry(label=n, settings=choices[n].settings, mode="train", harness=harness)
        for n in STRATEGIES
    ]
    entries.append(
        Entry(
            label="compute ceiling", settings=best_compute.settings, mode="compute", harness=harness
        )
    )
    entries.append(
        Entry(label="data ceiling", settings=best_data.settings, mode="data", harness=harness)
    )
    for reference in workload.references:
        ref_harness = Harness(
            reference.config, device=device, profile=profile, seed=seed, listener=listener
        )
        ref_harness.check(Settings(batch_size=batch))
        entries.append(
            Entry(
                label=reference.label,
                settings=choices["oracle"].settings,
                mode="train",
                harness=ref_harness,
            )
        )
    say(f"final: {profile.rounds} interleaved rounds")
    rounds = interleave(entries, profile.rounds, measure_entry)

    def figures_of(entry: Entry) -> list[float]:
        return rounds[entry.key()]

    by_label = {e.label: figures_of(e) for e in entries}
    medians = {label: median(values) for label, values in by_label.items()}
    ceiling = min(medians["compute ceiling"], medians["data ceiling"])
    search_s = {name: choices[name].search_s for name in STRATEGIES}
    verdicts = judge(
        {n: medians[n] for n in STRATEGIES},
        search_s,
        ceiling,
        must_beat_baselines=workload.must_beat_baselines,
    )
    for verdict in verdicts:
        say(verdict.line())

    rows = []
    for name in STRATEGIES:
        choice = choices[name]
        rows.append(
            {
                "strategy": name,
                "settings": choice.settings.to_dict(),
                "describe": choice.settings.describe(),
                "samples_per_s": medians[name],
                "rounds": by_label[name],
                "round_spread": spread(by_label[name]),
                "vs_oracle": _ratio(medians[name], medians["oracle"]),
                "vs_defaults": _ratio(medians[name], medians["defaults"]),
                "of_ceiling": _ratio(medians[name], ceiling),
                "search_s": choice.search_s,
                "search_vs_oracle": _ratio(choice.search_s, choices["oracle"].search_s),
                "probes": choice.probes,
                "detail": choice.detail,
            }
        )
    return {
        "name": workload.name,
        "config": str(workload.config.relative_to(workload.config.parents[2])),
        "summary": workload.summary,
        "batch_size": batch,
        "device": device,
        "workload": info,
        "grid": {"space": grid_space, "size": grid.size(), "knobs": grid.describe()},
        "strategies": rows,
        "ceilings": {
            "compute": _ceiling(best_compute, by_label["compute ceiling"], compute_sweep),
            "data": _ceiling(best_data, by_label["data ceiling"], data_sweep),
            "min": ceiling,
        },
        "references": [
            {
                "label": reference.label,
                "config": str(reference.config.relative_to(reference.config.parents[2])),
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
