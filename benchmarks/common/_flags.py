"""The flags that several suites' subcommands share, and the checks of their values.

Each suite adds the ones it takes to its own subcommand with its own help (what a
default means differs from suite to suite), so a flag a suite does not take is refused
by the parser itself rather than by a table of exceptions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common._workloads import WORKLOADS

RESULTS_DIR = Path(__file__).parents[1] / "results"
"""Where every suite writes its results files by default, beside ``RESULTS.md``."""


def add_run_flags(
    parser: argparse.ArgumentParser,
    *,
    workloads: str,
    rounds: str,
    seed: str,
    out: str,
) -> None:
    """``--workloads``, ``--rounds``, ``--seed``, ``--out`` and ``--keep-data``, which
    every suite takes; the strings are what each flag's default means in this suite."""
    parser.add_argument(
        "--workloads",
        default="",
        help=f"comma-separated names from {', '.join(w.name for w in WORKLOADS)}, or all "
        f"(default: {workloads})",
    )
    parser.add_argument("--rounds", type=int, help=f"interleaved rounds (default {rounds})")
    parser.add_argument("--seed", type=int, default=0, help=seed)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help=out)
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the workloads' files for the next run"
    )


def add_timing_flags(parser: argparse.ArgumentParser, *, seconds: str) -> None:
    """``--seconds`` (``seconds`` says what it times here) and ``--warmup``."""
    parser.add_argument("--seconds", type=float, help=seconds)
    parser.add_argument(
        "--warmup", type=float, help="untimed training before each measurement (default 0.5)"
    )


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """``--trials`` and ``--study-dir``, for the suites that run autotune's search."""
    parser.add_argument(
        "--trials", type=int, help="autotune's exploration trials (default: its own)"
    )
    parser.add_argument(
        "--study-dir", type=Path, help="keep the searches' studies here (default: not kept)"
    )


def names(args: argparse.Namespace) -> list[str]:
    """The workload names ``--workloads`` gave, blanks dropped."""
    return [n.strip() for n in args.workloads.split(",") if n.strip()]


def counts_problem(args: argparse.Namespace, *, least_rounds: int = 1) -> str | None:
    """A count or a duration out of range among the flags ``args`` has; None when none
    is (``least_rounds``: the fewest rounds this suite can judge on)."""
    least = {"rounds": least_rounds, "trials": 1, "seeds": 1}
    for name, fewest in least.items():
        value = getattr(args, name, None)
        if value is not None and value < fewest:
            return f"--{name} is {value}; expected >= {fewest}."
    seconds, warmup = getattr(args, "seconds", None), getattr(args, "warmup", None)
    if seconds is not None and seconds <= 0:
        return f"--seconds is {seconds}; expected > 0."
    if warmup is not None and warmup < 0:
        return f"--warmup is {warmup}; expected >= 0."
    scale = getattr(args, "epoch_scale", None)
    if scale is not None and scale <= 0:
        return f"--epoch-scale is {scale}; expected > 0."
    return None
