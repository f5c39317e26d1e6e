"""``python -m benchmarks --generalise`` (or ``generalise`` as the first word): the
generalisation benchmark's flags, their checks and its run (:mod:`benchmarks._generalise`).

It shares the suite's ``--workloads`` (default: all fourteen), ``--rounds`` (default 3,
at least 3), ``--out``, ``--seed`` (the plain loop's data order) and ``--keep-data``, and
the agreement check's ``--seconds``, ``--warmup``, ``--trials`` and ``--study-dir``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from autotune.machine._machine import detect_machine
from benchmarks import _generalise, _generalise_report, _generalise_targets
from benchmarks._generalise import GeneraliseOptions, parse_grid
from benchmarks._workloads import BenchWorkload, find

ONLY = ("seeds", "grid", "merge")
"""Flags of this mode alone."""
NOT_HERE = {
    "quick": "--quick does not apply to --generalise (use --grid small, --seeds, --seconds).",
    "no_summary": "--no-summary does not apply to --generalise (it writes no summary page).",
    "agreement": "--agreement and --generalise are two modes; give one.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The mode's own flags, in a group of their own."""
    group = parser.add_argument_group(
        "generalise",
        "three searches per workload (seeds 1-3, the default budget), then the plain loop "
        "measures a grid of workers x threads x persistence, the default loader and each "
        "choice, and judges issue 14's targets (also: python -m benchmarks generalise ...); "
        "--workloads defaults to all, --rounds to 3 (at least 3); --seconds, --warmup, "
        "--trials and --study-dir apply too",
    )
    group.add_argument("--generalise", action="store_true", help="run the generalisation benchmark")
    group.add_argument("--seeds", type=int, help="searches per workload, seeded 1..N (default 3)")
    group.add_argument(
        "--grid",
        help="the plain loop's grid: full (default), small (workers 0,2, persistent, threads 1 "
        "and all: a run that only shows the mode works), or a JSON object narrowing "
        'num_workers, threads ("all": every CPU), persistent_workers, e.g. '
        '\'{"num_workers": [0, 2, 4], "threads": ["all"]}\'',
    )
    group.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="measure nothing: merge these results files (per-workload runs) into one, written "
        "to --out with its markdown and plot",
    )


def applies(args: argparse.Namespace) -> bool:
    """Whether the command line is this mode's (or gives one of its flags)."""
    return bool(args.generalise) or any(getattr(args, name) is not None for name in ONLY)


def problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags for this mode; None when nothing is."""
    if not args.generalise:
        given = ", ".join("--" + n for n in ONLY if getattr(args, n) is not None)
        return f"{given} apply only with --generalise."
    for name, text in NOT_HERE.items():
        if getattr(args, name):
            return text
    counts = {"rounds": _generalise.MIN_ROUNDS, "seeds": 1, "trials": 1}
    for name, least in counts.items():
        value = getattr(args, name)
        if value is not None and value < least:
            return f"--{name} is {value}; expected >= {least}."
    if args.seconds is not None and args.seconds <= 0:
        return f"--seconds is {args.seconds}; expected > 0."
    if args.warmup is not None and args.warmup < 0:
        return f"--warmup is {args.warmup}; expected >= 0."
    missing = [str(p) for p in args.merge or () if not p.is_file()]
    if missing:
        return f"--merge: no such file {', '.join(missing)}."
    return None


def options(args: argparse.Namespace) -> GeneraliseOptions:
    """The run's options from the flags.

    Raises:
        ValueError: a ``--grid`` that is not a grid.
    """
    return GeneraliseOptions(
        seeds=args.seeds or _generalise.DEFAULT_SEEDS,
        rounds=args.rounds or _generalise.DEFAULT_ROUNDS,
        seconds=args.seconds if args.seconds is not None else 1.5,
        warmup=args.warmup if args.warmup is not None else 0.5,
        grid=parse_grid(args.grid),
        trials=args.trials,
        plain_seed=args.seed,
        study_dir=args.study_dir,
    )


def _path(out: Path, started: datetime.datetime, stem: str) -> Path:
    """``out`` when it names a ``.json`` file, else a file in that folder named by the
    start to the minute (per-workload runs of one day must not overwrite each other)."""
    return out if out.suffix == ".json" else out / f"{stem}-{started:%Y-%m-%d-%H%M}.json"


def _prepare(args: argparse.Namespace) -> tuple[GeneraliseOptions, list[BenchWorkload]]:
    """The options and the workloads, from flags that :func:`problem` passed.

    Raises:
        ValueError: a ``--grid`` that is not a grid, or an unknown workload.
    """
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    return options(args), find(names, every=True)


def main(args: argparse.Namespace) -> int:
    """Run the mode; returns the exit code (2: wrong flags, 1: a workload failed)."""
    try:
        wrong = problem(args)
        if wrong is None:
            run_options, workloads = _prepare(args)
    except ValueError as error:
        wrong = str(error)
    if wrong is not None:
        print(f"python -m benchmarks: {wrong}", file=sys.stderr)
        return 2
    started = datetime.datetime.now()
    if args.merge:
        merged = _generalise_report.merge(args.merge)
        written = _generalise_report.write(merged, _path(args.out, started, "generalise-merged"))
        print(f"written: {', '.join(str(p) for p in written)}", file=sys.stderr)
        return 0
    return _run(args, run_options, workloads, started)


def _run(
    args: argparse.Namespace,
    run_options: GeneraliseOptions,
    workloads: list[BenchWorkload],
    started: datetime.datetime,
) -> int:
    # The run's header and its helpers are the command line's, shared with every mode.
    from benchmarks import _cli

    machine = detect_machine()
    clock = _cli._Clock()
    path = _path(args.out, started, "generalise")
    results: dict[str, Any] = {
        "format": _cli.FORMAT,
        "mode": "generalise",
        "started": started.isoformat(timespec="seconds"),
        "host": _cli._host(),
        "commit": _cli._git("rev-parse", "HEAD"),
        "dirty": bool(_cli._git("status", "--porcelain", "--untracked-files=no")),
        "options": run_options.to_dict(),
        "targets": {
            "median_vs_grid": _generalise_targets.MEDIAN_VS_GRID,
            "worst_vs_grid": _generalise_targets.WORST_VS_GRID,
            "vs_default": _generalise_targets.VS_DEFAULT,
            "search_vs_space": _generalise_targets.SEARCH_VS_SPACE,
        },
        "machine": machine.to_dict(),
        "versions": _cli._versions(),
        "workloads": [],
    }
    written: tuple[Path, ...] = ()
    try:
        for workload in workloads:
            clock.prefix = f"{workload.name}: "
            try:
                section = _generalise.run_workload(workload, run_options, machine, clock.say)
            except Exception as error:  # report it, and go on with the other workloads
                clock.say(f"FAILED: {error}\n{traceback.format_exc()}")
                section = {"name": workload.name, "error": f"{type(error).__name__}: {error}"}
            results["workloads"].append(section)
            results["wall_s"] = time.monotonic() - clock.began
            print(_generalise_report.markdown(section), flush=True)
            written = _generalise_report.write(results, path)  # a run cut short keeps them
    finally:
        clock.prefix = ""
        if not args.keep_data:
            _cli._cleanup(workloads)
    clock.say(f"results: {', '.join(str(p) for p in written)}")
    return 1 if any("error" in s for s in results["workloads"]) else 0
