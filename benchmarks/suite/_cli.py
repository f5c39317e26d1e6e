"""``python -m benchmarks suite``: every strategy on every workload, re-measured side by
side (:func:`benchmarks.suite._check.run_workload`).

    python -m benchmarks suite [--quick] [--workloads NAME,...|all] [--rounds N] [--seed N]
                               [--out DIR] [--summary PATH | --no-summary] [--keep-data]

Progress goes to stderr, one table per workload to stdout; the results are written to
``DIR/<date>-<host>.json`` and ``.md``, and ``benchmarks/RESULTS.md`` is generated again
from the results folder (:mod:`benchmarks._page`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from autotune.machine._machine import detect_machine
from benchmarks import _page
from benchmarks.common._flags import add_run_flags, names
from benchmarks.common._runs import FORMAT, Clock, cleanup, git, host, versions
from benchmarks.common._workloads import find, full_profile, quick_profile
from benchmarks.suite import _report
from benchmarks.suite._check import run_workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's flags."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small grid and short windows (about 15 min on 2 cores)",
    )
    add_run_flags(
        parser,
        workloads=", ".join(w.name for w in find([])),
        rounds="3 quick, 5 full",
        seed="seeds autotune's sampler and every probe",
        out="folder for <date>-<host>.json and .md",
    )
    summary = parser.add_mutually_exclusive_group()
    summary.add_argument(
        "--summary",
        type=Path,
        default=_page.PAGE,
        help="the page generated from the results folder (default benchmarks/RESULTS.md)",
    )
    summary.add_argument("--no-summary", action="store_true", help="do not write the page")


def main(args: argparse.Namespace) -> int:
    """The suite: every strategy on every workload, re-measured side by side; returns the
    exit code (1 when a workload failed to run, 2 for an unknown workload)."""
    try:
        workloads = find(names(args))
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    profile = quick_profile() if args.quick else full_profile()
    if args.rounds is not None:
        profile = dataclasses.replace(profile, rounds=args.rounds)

    machine = detect_machine()
    clock = Clock()
    started = datetime.datetime.now()
    sections: list[dict[str, Any]] = []
    summary = None if args.no_summary else args.summary

    def write() -> tuple[Path, Path]:
        results = {
            "format": FORMAT,
            "date": started.strftime("%Y-%m-%d"),
            "started": started.isoformat(timespec="seconds"),
            "host": host(),
            "mode": profile.name,
            "profile": dataclasses.asdict(profile),
            "seed": args.seed,
            "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            "machine": machine.to_dict(),
            "versions": versions(),
            "wall_s": time.monotonic() - clock.began,
            "workloads": sections,
        }
        written = _report.write(results, args.out)
        if summary is not None:
            try:
                _page.write(args.out, summary)
            except ValueError as error:  # the results stay written; the page can wait
                clock.say(f"{summary} not written: {error}")
        return written

    try:
        for workload in workloads:
            clock.prefix = f"{workload.name}: "
            try:
                section = run_workload(workload, profile, machine, args.seed, clock.say)
            except Exception as error:  # report it, and go on with the other workloads
                clock.say(f"FAILED: {error}\n{traceback.format_exc()}")
                section = {"name": workload.name, "error": f"{type(error).__name__}: {error}"}
            sections.append(section)
            print(_report.text_table(section), flush=True)
            write()  # after every workload: a run cut short keeps what it measured
    finally:
        clock.prefix = ""
        if not args.keep_data:
            cleanup(workloads)
    json_path, md_path = write()
    clock.say(f"results: {json_path} and {md_path}" + (f"; {summary}" if summary else ""))
    return 1 if any("error" in s for s in sections) else 0
