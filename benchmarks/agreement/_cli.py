"""``python -m benchmarks agreement``: the probe's figures beside a plain training loop's,
for the default loader and autotune's choice (:mod:`benchmarks.agreement._check`).

    python -m benchmarks agreement [--workloads NAME,...] [--rounds N] [--seconds S]
                                   [--warmup S] [--trials N]
                                   [--study-dir DIR | --from-studies DIR]
                                   [--seed N] [--out PATH] [--keep-data]

Written to ``PATH`` (a ``.json`` file, or a folder for ``agreement-<date>.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from autotune.machine._machine import detect_machine
from benchmarks.agreement import _check as _agreement
from benchmarks.common._flags import add_run_flags, add_search_flags, add_timing_flags, names
from benchmarks.common._runs import Check, given, run_check
from benchmarks.common._workloads import find

DESCRIPTION = (
    "The probe's figures beside a plain training loop's, for the default loader and "
    "autotune's choice. --rounds and --seconds shorten a run."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The agreement check's flags."""
    add_run_flags(
        parser,
        workloads="every workload",
        rounds=str(_agreement.DEFAULT_ROUNDS),
        seed="seeds autotune's sampler and every probe",
        out="a .json file, or a folder for agreement-<date>.json",
    )
    add_timing_flags(
        parser,
        seconds="timed part of one measurement, by the probe and by the plain loop (default "
        "as long as a confirming round's probe, 4.5 s)",
    )
    add_search_flags(parser)
    parser.add_argument(
        "--from-studies",
        type=Path,
        help="read each workload's search from the newest study a run with --study-dir kept "
        "in DIR, instead of searching again",
    )


def main(args: argparse.Namespace) -> int:
    """The agreement check: search, then the plain loop, per workload; returns the exit
    code (1: a workload failed, 2: wrong flags)."""
    try:
        workloads = find(names(args), every=True)
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    problem = _from_studies_problem(args)
    if problem is not None:
        print(f"python -m benchmarks: {problem}", file=sys.stderr)
        return 2
    options = _agreement.AgreementOptions(
        **given(args, "rounds", "seconds", "warmup"),
        trials=args.trials,
        seed=args.seed,
        study_dir=args.study_dir,
        from_studies=args.from_studies,
    )
    machine = detect_machine()
    check = Check(
        name="agreement",
        header={
            "options": {
                **dataclasses.asdict(options),
                "study_dir": _text(args.study_dir),
                "from_studies": _text(args.from_studies),
            },
            "agreement": _agreement.AGREEMENT,
        },
        run=lambda workload, say: _agreement.run_workload(workload, options, machine, say),
        table=_agreement.markdown,
    )
    return run_check(check, workloads, machine, out=args.out, keep_data=args.keep_data)


def _from_studies_problem(args: argparse.Namespace) -> str | None:
    """--from-studies given with what only a search takes, or not a folder."""
    if args.from_studies is None:
        return None
    searching = [
        flag
        for flag, value in (("--study-dir", args.study_dir), ("--trials", args.trials))
        if value is not None
    ]
    if searching:
        return (
            f"--from-studies reads searches made before; {' and '.join(searching)} "
            "apply only to a new search: give one or the other."
        )
    if not args.from_studies.is_dir():
        return (
            f"--from-studies {args.from_studies}: no such folder; expected the --study-dir "
            "of an earlier run."
        )
    return None


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
