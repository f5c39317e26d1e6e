"""The command line of the suite.

    python -m benchmarks [--quick] [--workloads NAME,...|all] [--rounds N] [--seed N]
                         [--out DIR] [--summary PATH | --no-summary] [--keep-data]

Progress goes to stderr, one table per workload to stdout; the results are
written to ``DIR/<date>-<host>.json`` and ``.md``, and the markdown again to
``benchmarks/RESULTS.md`` (the page the README links to).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import platform
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import torch

import autotune
from autotune.machine._machine import detect_machine
from benchmarks import _report
from benchmarks._run import run_workload
from benchmarks._workloads import (
    ALL,
    WORKLOADS,
    BenchWorkload,
    find,
    full_profile,
    quick_profile,
)

HERE = Path(__file__).parent
FORMAT = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="How good are the settings autotune finds, and how cheaply: every strategy "
        "on every workload, re-measured side by side.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small grid and short windows (about 15 min on 2 cores)",
    )
    parser.add_argument(
        "--workloads",
        default="",
        help=f"comma-separated names from {', '.join(w.name for w in ALL)}, or all "
        f"(default: {', '.join(w.name for w in WORKLOADS)})",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3 quick, 5 full)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds autotune's sampler and every probe"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "results", help="folder for <date>-<host>.json and .md"
    )
    summary = parser.add_mutually_exclusive_group()
    summary.add_argument(
        "--summary", type=Path, default=HERE / "RESULTS.md", help="the stable markdown page"
    )
    summary.add_argument("--no-summary", action="store_true", help="do not write the stable page")
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the workloads' files for the next run"
    )
    return parser


class _Clock:
    """Progress lines on stderr, with the time since the run began."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.prefix = ""

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self.began
        print(f"[{elapsed:7.1f}s] {self.prefix}{text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit code (1 when a workload failed to run)."""
    args = _parser().parse_args(argv)
    try:
        workloads = find([n.strip() for n in args.workloads.split(",") if n.strip()])
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    profile = quick_profile() if args.quick else full_profile()
    if args.rounds is not None:
        if args.rounds < 1:
            print(
                f"python -m benchmarks: --rounds is {args.rounds}; expected >= 1.", file=sys.stderr
            )
            return 2
        profile = dataclasses.replace(profile, rounds=args.rounds)

    machine = detect_machine()
    clock = _Clock()
    started = datetime.datetime.now()
    sections: list[dict[str, Any]] = []
    summary = None if args.no_summary else args.summary

    def write() -> tuple[Path, Path]:
        results = {
            "format": FORMAT,
            "date": started.strftime("%Y-%m-%d"),
            "started": started.isoformat(timespec="seconds"),
            "host": _host(),
            "mode": profile.name,
            "profile": dataclasses.asdict(profile),
            "seed": args.seed,
            "commit": _git("rev-parse", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "machine": machine.to_dict(),
            "versions": {
                "autotune": autotune.__version__,
                "torch": torch.__version__,
                "optuna": optuna.__version__,
                "python": platform.python_version(),
            },
            "wall_s": time.monotonic() - clock.began,
            "workloads": sections,
        }
        return _report.write(results, args.out, summary)

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
            _cleanup(workloads)
    json_path, md_path = write()
    clock.say(f"results: {json_path} and {md_path}" + (f"; {summary}" if summary else ""))
    return 1 if any("error" in s for s in sections) else 0


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname().split(".")[0]) or "host"


def _git(*command: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *command], cwd=HERE, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _cleanup(workloads: Sequence[BenchWorkload]) -> None:
    """Call ``cleanup()`` of every config the run used that defines one."""
    configs = {w.config for w in workloads} | {r.config for w in workloads for r in w.references}
    for config in sorted(configs):
        spec = importlib.util.spec_from_file_location(f"benchmark_cleanup_{config.stem}", config)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cleanup = getattr(module, "cleanup", None)
        if callable(cleanup):
            cleanup()
