"""The strategies compared: how each picks a config, and what its search costs.

Every strategy measures through the same :class:`~benchmarks.suite._harness.Harness`
(autotune's probe), and each returns a :class:`Choice`: the config it would
train with, and the wall time its search took. The decision rules are small
functions over a ``measure`` callable, so tests can drive them with made-up
figures.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import autotune
from autotune import Machine, Settings
from autotune.space._space import Space
from autotune.study import locate, open_study, records
from benchmarks.suite._harness import Harness, Measured

STRATEGIES = ("defaults", "rule of thumb", "greedy sweep", "loader-only", "autotune", "oracle")
GREEDY_MIN_GAIN = 0.03
"""The greedy sweep keeps raising num_workers while each step gains more than this."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Choice:
    """What a strategy chose and what choosing cost."""

    strategy: str
    settings: Settings
    search_s: float
    """Wall time of the search (0 for a fixed rule)."""
    probes: int
    """Probes the search ran."""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


# --------------------------------------------------------------------- fixed rules
def defaults(batch_size: int) -> Choice:
    """``DataLoader(ds, batch_size=B)``, as most code has it."""
    return Choice(
        strategy="defaults", settings=Settings(batch_size=batch_size), search_s=0.0, probes=0
    )


def rule_of_thumb(batch_size: int, machine: Machine) -> Choice:
    """num_workers = CPU count, pin_memory, persistent workers, prefetch_factor=2."""
    settings = Settings(
        batch_size=batch_size,
        num_workers=machine.cpus,
        prefetch_factor=2,
        persistent_workers=True,
        # pin_memory=True is the rule; it only exists with an accelerator.
        pin_memory=machine.accelerator != "cpu",
    )
    return Choice(strategy="rule of thumb", settings=settings, search_s=0.0, probes=0)


# --------------------------------------------------------------------- greedy sweep
def with_workers(base: Settings, workers: int) -> Settings:
    """``base`` with ``workers`` workers and torch's defaults for the worker knobs."""
    if workers == 0:
        return dataclasses.replace(
            base, num_workers=0, prefetch_factor=None, persistent_workers=False
        )
    return dataclasses.replace(base, num_workers=workers, prefetch_factor=2)


def greedy_workers(
    measure: Callable[[Settings], float],
    base: Settings,
    workers: Sequence[int],
    min_gain: float = GREEDY_MIN_GAIN,
) -> tuple[Settings, list[tuple[int, float]]]:
    """Raise num_workers through ``workers`` (ascending) until a step gains no more
    than ``min_gain``; returns the best config and every step's figure."""
    steps: list[tuple[int, float]] = []
    best: tuple[Settings, float] | None = None
    for count in sorted(set(workers)):
        settings = with_workers(base, count)
        value = measure(settings)
        steps.append((count, value))
        if best is None or value > best[1] * (1 + min_gain):
            best = (settings, value)
        else:
            break
    if best is None:
        raise ValueError("the greedy sweep needs at least one worker count")
    return best[0], steps


def greedy_sweep(harness: Harness, batch_size: int, workers: Sequence[int]) -> Choice:
    """Raise num_workers in steps until training throughput stops rising.

    In the manner of PaddlePaddle's DataLoader autotune (which steps num_workers up
    and stops at the first step that does not pay), but measured on real training
    steps over the grid's worker counts; the other knobs stay at torch's defaults.
    """
    began = time.perf_counter()
    probes = harness.probes

    def measure(settings: Settings) -> float:
        return harness.measure(settings, "train", "greedy sweep").samples_per_s

    settings, steps = greedy_workers(measure, Settings(batch_size=batch_size), workers)
    return Choice(
        strategy="greedy sweep",
        settings=settings,
        search_s=time.perf_counter() - began,
        probes=harness.probes - probes,
        detail={"steps": [{"num_workers": w, "samples_per_s": v} for w, v in steps]},
    )


# --------------------------------------------------------------------- loader-only
def loader_configs(grid: Space, batch_sizes: Iterable[int]) -> list[Settings]:
    """The distinct loader configs of a grid (workers x prefetch x batch), persistent
    workers on and threads at torch's default: what a loader-only sweep tries."""
    seen: dict[str, Settings] = {}
    for batch in batch_sizes:
        for workers in grid.num_workers.values():
            assert isinstance(workers, int)
            prefetches: tuple[Any, ...] = grid.prefetch_factor.values() if workers else (None,)
            for prefetch in prefetches:
                settings = Settings(
                    batch_size=batch,
                    num_workers=workers,
                    prefetch_factor=prefetch,
                    persistent_workers=workers > 0,
                )
                seen.setdefault(settings.key(), settings)
    return list(seen.values())


def fastest(measured: Iterable[Measured]) -> Measured:
    """The fastest measurement that did not fail.

    Raises:
        ValueError: every one failed, or there were none.
    """
    ok = [m for m in measured if m.failure is None and m.samples_per_s > 0]
    if not ok:
        raise ValueError("no measurement succeeded")
    return max(ok, key=lambda m: m.samples_per_s)


def loader_only(sweep: Sequence[Measured], batch_size: int) -> Choice:
    """Tune the DataLoader by iterating it without the model, then train with the
    fastest loader found (what standalone DataLoader tuners do).

    ``sweep`` is the data-mode sweep the data ceiling is measured with; the loader-only
    strategy is charged for the part it would have run itself (the configs at the
    workload's own batch size: such tuners do not change the batch).
    """
    own = [m for m in sweep if m.settings.batch_size == batch_size]
    best = fastest(own)
    return Choice(
        strategy="loader-only",
        settings=best.settings,
        search_s=sum(m.wall_s for m in own),
        probes=len(own),
        detail={"loader_samples_per_s": best.samples_per_s},
    )


# --------------------------------------------------------------------- autotune
def autotune_search(
    config: Path,
    space: Mapping[str, Any],
    seed: int,
    options: Mapping[str, Any],
    progress: autotune.Progress | None = None,
) -> Choice:
    """``autotune.search`` with its default search settings, restricted to the grid."""
    with tempfile.TemporaryDirectory(prefix="autotune-bench-study-") as folder:
        study = Path(folder) / f"{config.stem}.db"
        began = time.perf_counter()
        result = autotune.search(
            config, space=dict(space), study=str(study), seed=seed, progress=progress, **options
        )
        search_s = time.perf_counter() - began
        trials = _trials(study)
    ran = [t for t in trials if t["duplicate_of"] is None and t["state"] != "FAIL"]
    ceilings = len(result.ceilings) + len(result.baseline_ceilings) + bool(result.loader_limit)
    return Choice(
        strategy="autotune",
        settings=result.settings,
        search_s=search_s,
        probes=1 + len(ran) + ceilings,  # the preflight, the trials, the ceilings
        detail={
            "samples_per_s": result.samples_per_s,
            "speedup": result.speedup,
            "ceiling_probes": ceilings,
            "ceilings": {k: f.samples_per_s for k, f in result.ceilings.items()},
            "confirmed": result.confirmed,
            "search_time": result.search_time.to_dict() if result.search_time else None,
            "trials": trials,
        },
    )


def _trials(study_path: Path) -> list[dict[str, Any]]:
    study = open_study(locate(study_path, None), create=False)
    return [
        {
            "number": r.number,
            "role": r.role,
            "state": r.state,
            "settings": r.settings.to_dict() if r.settings else None,
            "samples_per_s": r.value,
            "windows": len(r.figures.windows) if r.figures else 0,
            "duration_s": r.duration_s,
            "duplicate_of": r.duplicate_of,
            "failure": r.failure.message if r.failure else None,
        }
        for r in records(study)
    ]


# --------------------------------------------------------------------- oracle
def oracle(harness: Harness, grid: Space) -> tuple[Choice, list[Measured]]:
    """Every config of the grid, each probed fully; the fastest wins."""
    began = time.perf_counter()
    configs = list(grid.configs())
    measured = [
        harness.measure(settings, "train", f"oracle {i}/{len(configs)}")
        for i, settings in enumerate(configs, 1)
    ]
    search_s = time.perf_counter() - began
    best = fastest(measured)
    choice = Choice(
        strategy="oracle",
        settings=best.settings,
        search_s=search_s,
        probes=len(configs),
        detail={"samples_per_s": best.samples_per_s},
    )
    return choice, measured
