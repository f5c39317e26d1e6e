"""Ceilings: what the model trains with no loader in its way, and what a loader
delivers with no model, for the winner and for the default DataLoader.

    compute ceiling   the model on batches already in memory (probe mode "compute")
    data ceiling      the loader alone, batches fetched and dropped (probe mode "data")
    loader limit      the winner's loader alone with as many workers as the space tried
                      (by default 4 per CPU, at most 32, or more where the worker sweep
                      widened it): about the most any worker count gets out of this
                      dataset on this machine, whether loading waits on the CPU or on
                      storage

The diagnosis compares each config's throughput with them. A probe measuring the
same thing as an earlier one (the default loader's batch size and threads are
often the winner's) is not run twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping

from autotune._format import format_rate
from autotune._stages import Stage
from autotune.explore import compute_key
from autotune.probe import Figures, Measurement, Mode, ProbeRequest, reference_windows, run_probe
from autotune.progress import Progress
from autotune.settings import Settings


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ceilings:
    """The ceilings a search measured."""

    winner: dict[str, Figures]
    """"compute" and "data" of the chosen config."""
    baseline: dict[str, Figures]
    """"compute" and "data" of the default DataLoader."""
    loader_limit: Measurement | None
    """The winner's loader alone with the most workers the space tried."""


def limit_settings(settings: Settings, most_workers: int) -> Settings:
    """The loader of ``settings`` with ``most_workers`` workers (or its own, if it has
    more); workers started here cap their native pools as autotune's configs do by
    default (:meth:`Settings.started_worker_threads`)."""
    workers = max(settings.num_workers, most_workers)
    if workers == settings.num_workers:
        return settings
    return dataclasses.replace(
        settings,
        num_workers=workers,
        prefetch_factor=settings.prefetch_factor or 2,
        persistent_workers=True,
        worker_threads=settings.started_worker_threads(),
    )


def _key(mode: str, settings: Settings) -> Hashable:
    """What a ceiling depends on: the model's work for compute, the loader for data."""
    if mode == "compute":
        return (mode, settings.batch_size, settings.amp, settings.threads)
    return (mode, dataclasses.replace(settings, amp="off", echo=1).key())


def _ceiling_jobs(
    winner: Settings, baseline: Settings, limit: Settings, default_threads: int | None
) -> list[tuple[str, Mode, Settings]]:
    """The ceiling probes as (owner, mode, settings); a compute probe of a config with no
    thread setting runs ``default_threads`` threads, as such a config does."""

    def model_of(settings: Settings) -> Settings:
        if settings.threads is None and default_threads is not None:
            return dataclasses.replace(settings, threads=default_threads)
        return settings

    return [
        ("winner", "compute", model_of(winner)),
        ("winner", "data", winner),
        ("baseline", "compute", model_of(baseline)),
        ("baseline", "data", baseline),
        ("limit", "data", limit),
    ]


def _probe_ceiling(
    template: ProbeRequest, mode: Mode, settings: Settings, progress: Progress
) -> Figures | None:
    """Run one ceiling probe and say its result; None where it failed."""
    result = run_probe(dataclasses.replace(template, settings=settings, mode=mode))
    what = f"{mode} ceiling of {settings.describe()}"
    if result.failure is None:
        progress.message(f"{what}: {format_rate(result.figures.samples_per_s)} samples/s")
        return result.figures
    progress.message(f"{what} not measured: {result.failure.message}")
    return None


def measure_ceilings(
    template: ProbeRequest,
    winner: Settings,
    baseline: Settings,
    most_workers: int,
    progress: Progress,
    known_compute: Mapping[str, Figures] | None = None,
    default_threads: int | None = None,
) -> Ceilings:
    """Run the ceiling probes; a failed one is left out and said so. Compute ceilings
    already measured (by the bounds stage, keyed by :func:`compute_key`) are reused.
    ``default_threads`` is the torch threads a probe without a thread setting runs (as
    the preflight found): such a config's compute ceiling is the one with that many."""
    limit = limit_settings(winner, most_workers)
    known = known_compute or {}
    template = dataclasses.replace(template, max_windows=reference_windows(template.max_windows))
    jobs = _ceiling_jobs(winner, baseline, limit, default_threads)
    measured: dict[Hashable, Figures | None] = {
        _key(mode, settings): known[compute_key(settings)]
        for _, mode, settings in jobs
        if mode == "compute" and compute_key(settings) in known
    }
    distinct = len({_key(mode, settings) for _, mode, settings in jobs} - set(measured))
    progress.phase(
        Stage.CEILINGS,
        "the model on batches in memory; the loader with no model "
        f"(the best's, the default's, and {limit.num_workers} workers)",
    )
    progress.plan(Stage.CEILINGS, distinct, None)
    found: dict[str, dict[str, Figures]] = {"winner": {}, "baseline": {}, "limit": {}}
    for owner, mode, settings in jobs:
        key = _key(mode, settings)
        if key not in measured:
            measured[key] = _probe_ceiling(template, mode, settings, progress)
        figures = measured[key]
        if figures is not None:
            found[owner][mode] = figures
    limit_figures = found["limit"].get("data")
    return Ceilings(
        winner=found["winner"],
        baseline=found["baseline"],
        loader_limit=(
            Measurement(settings=limit, figures=limit_figures) if limit_figures else None
        ),
    )
