"""``python -m benchmarks generalise``: the generalisation benchmark's flags, their checks
and its run (:mod:`benchmarks.generalise._check`).

    python -m benchmarks generalise [--workloads NAME,...] [--seeds N] [--rounds N]
                                    [--seconds S] [--warmup S] [--grid full|small|JSON]
                                    [--trials N] [--study-dir DIR] [--out PATH] [--peer]
                                    [--peer-budget]
                                    [--keep-data] [--merge JSON ... | --rejudge JSON ...]

``--workloads`` defaults to all fifteen, ``--rounds`` to 3 (at least 3), ``--seed`` sets
the plain loop's data order, and ``--grid`` is read by
:func:`benchmarks.generalise._check.parse_grid`. The command line (:mod:`benchmarks._cli`)
refuses the counts out of range before :func:`main` runs; the run is
:func:`benchmarks.common._runs.run_check`'s, written to ``PATH`` (a ``.json`` file, or a
folder for ``generalise-<date>-<time>.json``) with its markdown and plot beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path
from typing import Any

from autotune.machine._machine import detect_machine
from benchmarks.common._flags import add_run_flags, add_search_flags, add_timing_flags
from benchmarks.common._runs import Check, given, results_path, run_check
from benchmarks.common._workloads import BenchWorkload, find
from benchmarks.generalise import _check as _generalise
from benchmarks.generalise import _report as _generalise_report
from benchmarks.generalise import _rounds as _generalise_rounds
from benchmarks.generalise import _targets as _generalise_targets
from benchmarks.generalise._check import GeneraliseOptions, parse_grid
from benchmarks.peer._run import installed as peer_installed

STAMP = "%Y-%m-%d-%H%M"
"""How a results file in a folder is dated: to the minute, so that per-workload runs of
one day do not overwrite each other."""
GRID_HELP = (
    "the plain loop's grid: full (default), small (workers 0,2, persistent, threads 1 and "
    "all: a run that only shows the mode works), or a JSON object narrowing num_workers, "
    'threads ("all": every CPU), persistent_workers, worker_threads (null: uncapped), e.g. '
    '\'{"num_workers": [0, 2, 4], "threads": ["all"]}\''
)
"""``--grid`` as this mode reads it."""
DESCRIPTION = (
    "Three searches per workload (seeds 1-3, the default budget), then the plain loop "
    "measures a grid of workers x threads x persistence, the default loader and each "
    "choice, and judges the generalisation targets. --grid small, --seeds and --seconds "
    "shorten a run."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The mode's flags."""
    add_run_flags(
        parser,
        workloads="all",
        rounds="3, at least 3",
        seed="the plain loop's data order (the searches are seeded 1..N)",
        out="a .json file, or a folder for generalise-<date>-<time>.json",
    )
    add_timing_flags(parser, seconds="timed part of one plain-loop measurement (default 1.5)")
    add_search_flags(parser)
    parser.add_argument("--grid", help=GRID_HELP)
    parser.add_argument("--seeds", type=int, help="searches per workload, seeded 1..N (default 3)")
    parser.add_argument(
        "--final-rounds",
        type=int,
        help="rounds of the final set, over the default, the choices and the grid's leaders "
        f"(default {_generalise_rounds.FINAL_ROUNDS})",
    )
    parser.add_argument(
        "--peer",
        action="store_true",
        help="also run the peer, loadtune, once per workload with its own defaults, and "
        "measure its choice beside the searches' (needs pip install -e '.[bench-peer]')",
    )
    parser.add_argument(
        "--peer-budget",
        action="store_true",
        help="with --peer (or --rejudge of a run that had it), also search once (seed 1) with "
        "the peer's wall time as the budget, and measure that choice beside the others",
    )
    parser.add_argument(
        "--rejudge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="search nothing: take the searches and first rounds of these results files (the "
        "later run of a workload twice), measure the final set of rounds and judge again; "
        "--workloads narrows them, --final-rounds applies; written to --out",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="measure nothing: merge these results files (per-workload runs) into one, written "
        "to --out with its markdown and plot",
    )


def problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags for this mode that the command line does not check
    for every mode; None when nothing is."""
    if args.merge and args.rejudge:
        return "--merge and --rejudge are two ways to read results files; give one."
    if args.peer and (args.merge or args.rejudge):
        return "--peer runs loadtune beside the searches; --merge and --rejudge search nothing."
    if args.peer_budget and not (args.peer or args.rejudge):
        return (
            "--peer-budget gives a search the peer's wall time; it needs --peer (or "
            "--rejudge of a run that had it)."
        )
    if args.peer and not peer_installed():
        return "--peer needs loadtune, which is not installed; pip install -e '.[bench-peer]'."
    for flag, paths in (("--merge", args.merge), ("--rejudge", args.rejudge)):
        missing = [str(p) for p in paths or () if not p.is_file()]
        if missing:
            return f"{flag}: no such file {', '.join(missing)}."
    if args.final_rounds is not None and args.final_rounds < _generalise.MIN_ROUNDS:
        return f"--final-rounds is {args.final_rounds}; expected >= {_generalise.MIN_ROUNDS}."
    return None


def options(args: argparse.Namespace) -> GeneraliseOptions:
    """The run's options from the flags.

    Raises:
        ValueError: a ``--grid`` that is not a grid.
    """
    return GeneraliseOptions(
        **given(args, "seeds", "rounds", "seconds", "warmup", "final_rounds"),
        grid=parse_grid(args.grid),
        trials=args.trials,
        plain_seed=args.seed,
        study_dir=args.study_dir,
        peer=args.peer,
        peer_budget=args.peer_budget,
    )


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
    if wrong is None and (args.merge or args.rejudge):
        try:
            earlier = _generalise_report.merge(args.merge or args.rejudge)
        except (ValueError, KeyError) as error:
            wrong = f"{'--merge' if args.merge else '--rejudge'}: {error}"
    if wrong is not None:
        print(f"python -m benchmarks: {wrong}", file=sys.stderr)
        return 2
    if args.merge:
        merged = earlier
        path = results_path(args.out, "generalise-merged", datetime.datetime.now(), STAMP)
        written = _generalise_report.write(merged, path)
        print(f"written: {', '.join(str(p) for p in written)}", file=sys.stderr)
        return 0
    if args.rejudge:
        return _rejudge(args, run_options, earlier)
    return _run(args, run_options, workloads)


def _targets() -> dict[str, float]:
    """The bounds the verdicts are judged by, as a results file records them."""
    return {
        "median_vs_grid": _generalise_targets.MEDIAN_VS_GRID,
        "worst_vs_grid": _generalise_targets.WORST_VS_GRID,
        "vs_default": _generalise_targets.VS_DEFAULT,
        "search_vs_space": _generalise_targets.SEARCH_VS_SPACE,
    }


def _rejudge(args: argparse.Namespace, run_options: GeneraliseOptions, old: dict[str, Any]) -> int:
    """The final set of rounds over the searches and first rounds of earlier runs,
    measured now and judged again; the first rounds' options (seconds, warm-up, the plain
    loop's seed) are the earlier run's, so the final set measures alike."""
    sections = {s["name"]: s for s in old["workloads"] if "error" not in s}
    asked = {n.strip() for n in args.workloads.split(",") if n.strip()} - {"all"}
    workloads = [w for w in find(list(sections)) if not asked or w.name in asked]
    if not workloads:
        print(
            f"python -m benchmarks: --rejudge: none of {sorted(asked)} in those files "
            f"(they hold {sorted(sections)}).",
            file=sys.stderr,
        )
        return 2
    earlier = old["options"]
    machine = detect_machine()
    options = dataclasses.replace(
        run_options,
        seconds=earlier["seconds"],
        warmup=earlier["warmup"],
        plain_seed=earlier["plain_seed"],
    )
    check = Check(
        name=_generalise_report.MODES[1],
        header={
            "targets": _targets(),
            "options": {
                **earlier,
                "final_rounds": options.final_rounds,
                "leaders": options.leaders,
                "peer_budget": options.peer_budget or earlier.get("peer_budget", False),
            },
            "rejudged_from": old["merged_from"],
        },
        run=lambda workload, say: _generalise.judge_again(
            _generalise.add_budgeted(sections[workload.name], workload, options, machine, say)
            if options.peer_budget
            else sections[workload.name],
            workload.config,
            options,
            say,
        ),
        table=_generalise_report.markdown,
        write=_generalise_report.write,
        stamp=STAMP,
    )
    return run_check(check, workloads, machine, out=args.out, keep_data=args.keep_data)


def _run(
    args: argparse.Namespace, run_options: GeneraliseOptions, workloads: list[BenchWorkload]
) -> int:
    machine = detect_machine()
    check = Check(
        name="generalise",
        header={
            "options": run_options.to_dict(),
            "targets": _targets(),
        },
        run=lambda workload, say: _generalise.run_workload(workload, run_options, machine, say),
        table=_generalise_report.markdown,
        write=_generalise_report.write,
        stamp=STAMP,
    )
    return run_check(check, workloads, machine, out=args.out, keep_data=args.keep_data)
