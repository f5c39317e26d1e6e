"""A search's plan without running it: the space, the knobs left out and why, the trial
budget, and an estimate of the time (``autotune search --dry-run``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._format import format_duration
from autotune.decide import most_confirmed, most_in_runoff
from autotune.explore import MAX_COMBINATIONS, READINGS
from autotune.pipeline._setup import Setup, inputs, prepare
from autotune.probe import reference_windows
from autotune.workload import SearchOptions

PROBE_START_S = 1.0
"""About what a probe costs before its first batch: its process and the first batches."""
CEILING_PROBES = 5
"""Compute and data ceilings of the winner and the default, and the loader limit."""


def dry_run(config: str | Path, *, device: str | None = None, **options: Any) -> list[str]:
    """What ``autotune search CONFIG`` would do, as lines for the terminal; runs nothing.

    Args:
        config: the config file.
        device: overrides the config's device.
        **options: search options, as for ``autotune.search``.
    """
    workload, user_space, search_options = inputs(
        config,
        dataset=None,
        model=None,
        loss=None,
        optimizer=None,
        step=None,
        collate_fn=None,
        batch_size=None,
        device=device,
        name=None,
        space=None,
        options=options,
    )
    setup = prepare(workload, user_space, search_options)
    return _plan_lines(setup, search_options, workload.batch_size, user_space)


def _plan_lines(
    setup: Setup, options: SearchOptions, batch_size: int, user_space: Mapping[str, Any]
) -> list[str]:
    space = setup.space
    lines = [
        "dry run: nothing is measured and nothing is written",
        f"device: {setup.device}; {setup.placement.describe()}",
        f"study: {setup.path} ({'exists: a search adds to it' if setup.path.exists() else 'new'})",
        f"the default loader: num_workers=0, batch_size={batch_size}",
        f"space: {space.size()} configs",
    ]
    lines += [f"  {line}" for line in space.describe()]
    lines.append(
        f"budget: {options.trials} exploration trials"
        + (f", none started after {options.timeout:g} s" if options.timeout else "")
        + f"; then {options.finalists} or more finalists and the default loader in "
        f"{options.rounds} interleaved round{'' if options.rounds == 1 else 's'}"
        + (
            f", and up to {options.runoff_rounds} more for those still within the noise of "
            "each other"
            if options.runoff_rounds
            else ""
        )
    )
    lines.append(_estimate(options, space.size(), len(setup.placement.slots())))
    return lines


def _estimate(options: SearchOptions, space_size: int, slots: int) -> str:
    """The most the search should take: every trial run in full, one slot at a time."""
    window = options.window_seconds
    full = PROBE_START_S + options.warmup_seconds + options.max_windows * window
    short = PROBE_START_S + options.warmup_seconds + reference_windows(options.max_windows) * window
    bounds = min(MAX_COMBINATIONS, space_size) * READINGS * short if options.bounds else 0.0
    explore = min(options.trials, space_size) * full
    if options.timeout is not None:
        explore = min(explore, options.timeout + full)
    confirm = (
        most_confirmed(options.finalists) * options.rounds
        + most_in_runoff() * options.runoff_rounds
    ) * full
    ceilings = CEILING_PROBES * full if options.ceilings else 0.0
    total = bounds + (explore + confirm) / max(1, slots) + ceilings
    return (
        f"time: at most about {format_duration(total)} (bounds {format_duration(bounds)}, "
        f"exploring {format_duration(explore)}, confirming {format_duration(confirm)}, "
        f"ceilings {format_duration(ceilings)}); trials that ASHA prunes end sooner"
    )
