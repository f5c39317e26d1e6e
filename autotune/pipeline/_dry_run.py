"""A search's plan without running it: the space, the knobs left out and why, the trial
budget, and an estimate of the time (``autotune search --dry-run``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune._format import format_duration
from autotune._stages import Stage
from autotune.explore import readings_left, sweep_left
from autotune.pipeline._budget import plan, record, room
from autotune.pipeline._costs import PROBE_START_S, ProbeCost, SearchShape, stage_seconds
from autotune.pipeline._setup import Setup, inputs, prepare
from autotune.workload import SearchOptions


def dry_run(config: str | Path, *, device: str | None = None, **options: Any) -> list[str]:
    """What ``autotune search CONFIG`` would do, as lines for the terminal; runs nothing.

    Args:
        config: the config file.
        device: overrides the config's device.
        **options: search options, as for ``autotune.search``.
    """
    workload, user_space, search_options = inputs(
        config, {"device": device}, space=None, options=options
    )
    setup = prepare(workload, user_space, search_options)
    return _plan_lines(setup, search_options, workload.batch_size, user_space)


def _plan_lines(
    setup: Setup, options: SearchOptions, batch_size: int, user_space: Mapping[str, Any]
) -> list[str]:
    space = setup.space
    if not setup.study.is_file:
        state = f"study {setup.study.name!r} in a database: a search adds to it or makes it"
    else:
        state = "exists: a search adds to it" if setup.study.exists() else "new"
    lines = [
        "dry run: nothing is measured and nothing is written",
        f"device: {setup.device}; {setup.placement.describe()}",
        f"study: {setup.study} ({state})",
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
    lines.append(_estimate(options, setup, user_space))
    if options.budget is not None:
        lines.append(_budget_line(options, options.budget, setup, user_space))
    return lines


def _shape(setup: Setup, user_space: Mapping[str, Any], options: SearchOptions) -> SearchShape:
    """The stages' sizes of a new study, the DDP stage's unknown before the preflight."""
    return SearchShape(
        bounds=readings_left(setup.space),
        sweep_probes=sweep_left(setup.space, user_space),
        slots=len(setup.placement.slots()),
        in_turns=options.backend == "optuna",
    )


def _estimate(options: SearchOptions, setup: Setup, user_space: Mapping[str, Any]) -> str:
    """The most the search should take: every trial run in full, and the widest
    confirming rounds."""
    shape = _shape(setup, user_space, options)
    stages = stage_seconds(shape, options, ProbeCost.of(options), at_most=True)
    bounds = stages[Stage.BOUNDS] + stages[Stage.WORKERS]
    confirm = stages[Stage.CONFIRM] + stages[Stage.RUNOFF]
    total = PROBE_START_S + sum(stages.values())
    return (
        f"time: at most about {format_duration(total)} (bounds {format_duration(bounds)}, "
        f"exploring {format_duration(stages[Stage.EXPLORE])}, "
        f"confirming {format_duration(confirm)}, "
        f"ceilings {format_duration(stages[Stage.CEILINGS])}); trials that ASHA prunes end sooner"
    )


def _budget_line(
    options: SearchOptions, budget_s: float, setup: Setup, user_space: Mapping[str, Any]
) -> str:
    """The plan the budget would make, with a probe's start and step guessed: the search
    plans again once its preflight has measured them."""
    found = plan(
        options,
        budget_s=room(budget_s),
        spent_s=PROBE_START_S,
        shape=_shape(setup, user_space, options),
        cost=ProbeCost.of(options),
    )
    planned = record(options, found, budget_s=budget_s, spent_s=PROBE_START_S)
    return f"{planned.describe()} (planned again after the preflight)"
