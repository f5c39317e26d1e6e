"""``python -m benchmarks online``: one epoch from a cold start of the default loader, the
best static config of a grid and ``autotune.online`` (:mod:`benchmarks.online._check`).

    python -m benchmarks online [--workloads NAME,...] [--rounds N] [--seconds S]
                                [--warmup S] [--grid JSON] [--epoch-scale F] [--seed N]
                                [--out PATH] [--keep-data]

Written to ``PATH`` (a ``.json`` file, or a folder for ``online-<date>.json``) and the
same name with ``.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from autotune import SpaceError
from autotune.machine._machine import Machine, detect_machine
from benchmarks.common._flags import add_run_flags, add_timing_flags, names
from benchmarks.common._runs import Check, given, run_check
from benchmarks.generalise._check import NAMED_GRIDS
from benchmarks.online import _check as _online

DESCRIPTION = (
    "One epoch from a cold start: the default loader, the best static config of a grid "
    "(timed by the plain loop) and autotune.online, in rotating rounds. --rounds and "
    "--seconds shorten a run."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The online comparison's flags."""
    add_run_flags(
        parser,
        workloads=", ".join(_online.DEFAULT_WORKLOADS),
        rounds=str(_online.DEFAULT_ROUNDS),
        seed="seeds the epochs' data order and every measurement",
        out="a .json file, or a folder for online-<date>.json",
    )
    add_timing_flags(parser, seconds="timed part of one plain-loop measurement (default 1.5)")
    parser.add_argument(
        "--grid",
        help="the static grid's loader knobs as a JSON space dict, over the default "
        "(num_workers 0 and doubling to the online bound, prefetch 2-8, not persistent), e.g. "
        '\'{"num_workers": [0, 4], "prefetch_factor": 2, "persistent_workers": false}\'',
    )
    parser.add_argument(
        "--epoch-scale",
        type=float,
        help="multiply every workload's epoch length (default 1: 10-40 s with the default loader)",
    )


def main(args: argparse.Namespace) -> int:
    """The online comparison: the grid, then one epoch of each loader, per workload;
    returns the exit code (1: a workload failed, 2: wrong flags)."""
    machine = detect_machine()
    try:
        workloads = _online.online_workloads(names(args))
        grid = _grid(args.grid, machine)
    except (ValueError, SpaceError) as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    options = _online.OnlineOptions(
        **given(args, "rounds", "seconds", "warmup", "epoch_scale"), grid=grid, seed=args.seed
    )
    check = Check(
        name="online",
        header={
            "options": dataclasses.asdict(options),
            "targets": {"static": _online.STATIC_BOUND, "default": _online.DEFAULT_BOUND},
        },
        run=lambda workload, say: _online.run_workload(workload, options, machine, say),
        table=_online.markdown,
        document=_online.document,
    )
    return run_check(check, workloads, machine, out=args.out, keep_data=args.keep_data)


def _grid(text: str | None, machine: Machine) -> dict[str, Any]:
    """``--grid``'s JSON object, checked against this machine before any measurement.

    Raises:
        ValueError: not a JSON object, or a knob that is not a loader knob.
        SpaceError: a value the space does not allow here.
    """
    if text is None:
        return {}
    if text in NAMED_GRIDS:
        raise ValueError(f"--grid {text} is a grid of `generalise`; `online` takes a JSON object.")
    try:
        grid = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--grid is not JSON ({error}): {text!r}") from None
    if not isinstance(grid, dict):
        raise ValueError(f"--grid is {text!r}; expected a JSON object of knobs and values.")
    _online.grid_configs(grid, machine, batch_size=1)
    return grid
