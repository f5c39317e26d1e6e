"""The command line of the suite.

    python -m benchmarks [--quick] [--workloads NAME,...|all] [--rounds N] [--seed N]
                         [--out DIR] [--summary PATH | --no-summary] [--keep-data]
    python -m benchmarks --agreement [--workloads NAME,...] [--rounds N] [--seconds S]
                         [--warmup S] [--trials N] [--study-dir DIR] [--seed N]
                         [--out PATH] [--keep-data]
    python -m benchmarks --generalise [--workloads NAME,...] [--seeds N] [--rounds N]
                         [--seconds S] [--warmup S] [--grid full|small|JSON] [--trials N]
                         [--study-dir DIR] [--out PATH] [--keep-data] [--merge JSON ...]

Progress goes to stderr, one table per workload to stdout; the results are
written to ``DIR/<date>-<host>.json`` and ``.md``, and the markdown again to
``benchmarks/RESULTS.md`` (the page the README links to).

``--agreement`` (or ``agreement`` as the first word) runs the agreement check
instead (:mod:`benchmarks._agreement`): the probe's figures beside a plain training
loop's, written to ``PATH`` (a ``.json`` file, or a folder for
``agreement-<date>.json``).

``--generalise`` (or ``generalise`` as the first word) runs the generalisation benchmark
instead (:mod:`benchmarks._generalise_cli`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
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
from benchmarks import _agreement, _generalise_cli, _report
from benchmarks._run import run_workload
from benchmarks._workloads import (
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
        help=f"comma-separated names from {', '.join(w.name for w in WORKLOADS)}, or all "
        f"(default: {', '.join(w.name for w in find([]))})",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3 quick, 5 full)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds autotune's sampler and every probe"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results",
        help="folder for <date>-<host>.json and .md (--agreement: a .json file, or a folder "
        "for agreement-<date>.json)",
    )
    summary = parser.add_mutually_exclusive_group()
    summary.add_argument(
        "--summary", type=Path, default=HERE / "RESULTS.md", help="the stable markdown page"
    )
    summary.add_argument("--no-summary", action="store_true", help="do not write the stable page")
    parser.add_argument(
        "--keep-data", action="store_true", help="keep the workloads' files for the next run"
    )
    _agreement_arguments(parser)
    _generalise_cli.add_arguments(parser)
    return parser


def _agreement_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "agreement",
        "the probe's figures beside a plain training loop's, for the default loader and "
        "autotune's choice (also: python -m benchmarks agreement ...); --workloads defaults "
        "to every workload, --rounds to 5",
    )
    group.add_argument(
        "--agreement", action="store_true", help="run the agreement check instead of the suite"
    )
    group.add_argument(
        "--trials", type=int, help="autotune's exploration trials (default: its own)"
    )
    group.add_argument(
        "--seconds", type=float, help="timed part of one plain-loop measurement (default 1.5)"
    )
    group.add_argument("--warmup", type=float, help="untimed training before it (default 0.5)")
    group.add_argument(
        "--study-dir", type=Path, help="keep the searches' studies here (default: not kept)"
    )


_AGREEMENT_ONLY = ("trials", "seconds", "warmup", "study_dir")


class _Clock:
    """Progress lines on stderr, with the time since the run began."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.prefix = ""

    def say(self, text: str) -> None:
        elapsed = time.monotonic() - self.began
        print(f"[{elapsed:7.1f}s] {self.prefix}{text}", file=sys.stderr, flush=True)


def _mode_word(argv: Sequence[str]) -> list[str]:
    """The words, a mode given as the first (``agreement ...``) turned into its flag."""
    words = list(argv)
    if words[:1] in (["agreement"], ["generalise"]):
        words[0] = "--" + words[0]
    return words


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (or the agreement check); returns the exit code (1 when a workload
    failed to run, 2 for wrong arguments)."""
    args = _parser().parse_args(_mode_word(sys.argv[1:] if argv is None else argv))
    if _generalise_cli.applies(args):
        return _generalise_cli.main(args)
    problem = _misplaced(args) or _counts_problem(args)
    if problem:
        print(f"python -m benchmarks: {problem}", file=sys.stderr)
        return 2
    if args.agreement:
        return _agreement_main(args)
    try:
        workloads = find([n.strip() for n in args.workloads.split(",") if n.strip()])
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    profile = quick_profile() if args.quick else full_profile()
    if args.rounds is not None:
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
            "versions": _versions(),
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


def _misplaced(args: argparse.Namespace) -> str | None:
    """A flag given to the mode it does not apply to."""
    if args.agreement and args.quick:
        return "--quick does not apply to --agreement (use --trials, --rounds, --seconds)."
    if args.agreement and args.no_summary:
        return "--no-summary does not apply to --agreement (it writes no summary page)."
    given = [name for name in _AGREEMENT_ONLY if getattr(args, name) is not None]
    if given and not args.agreement:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        return f"{flags} apply only with --agreement."
    return None


def _counts_problem(args: argparse.Namespace) -> str | None:
    """A count or a duration out of range."""
    for name in ("rounds", "trials"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name} is {value}; expected >= 1."
    if args.seconds is not None and args.seconds <= 0:
        return f"--seconds is {args.seconds}; expected > 0."
    if args.warmup is not None and args.warmup < 0:
        return f"--warmup is {args.warmup}; expected >= 0."
    return None


def _agreement_main(args: argparse.Namespace) -> int:
    """The agreement check: search, then the plain loop, per workload."""
    try:
        workloads = find([n.strip() for n in args.workloads.split(",") if n.strip()], every=True)
    except ValueError as error:
        print(f"python -m benchmarks: {error}", file=sys.stderr)
        return 2
    options = _agreement.AgreementOptions(
        rounds=args.rounds or _agreement.DEFAULT_ROUNDS,
        seconds=args.seconds if args.seconds is not None else 1.5,
        warmup=args.warmup if args.warmup is not None else 0.5,
        trials=args.trials,
        seed=args.seed,
        study_dir=args.study_dir,
    )
    machine = detect_machine()
    clock = _Clock()
    started = datetime.datetime.now()
    path = (
        args.out if args.out.suffix == ".json" else args.out / f"agreement-{started:%Y-%m-%d}.json"
    )
    results: dict[str, Any] = {
        "format": FORMAT,
        "mode": "agreement",
        "started": started.isoformat(timespec="seconds"),
        "host": _host(),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "options": {**dataclasses.asdict(options), "study_dir": _text(args.study_dir)},
        "agreement": _agreement.AGREEMENT,
        "machine": machine.to_dict(),
        "versions": _versions(),
        "workloads": [],
    }
    try:
        for workload in workloads:
            clock.prefix = f"{workload.name}: "
            try:
                section = _agreement.run_workload(workload, options, machine, clock.say)
            except Exception as error:  # report it, and go on with the other workloads
                clock.say(f"FAILED: {error}\n{traceback.format_exc()}")
                section = {"name": workload.name, "error": f"{type(error).__name__}: {error}"}
            results["workloads"].append(section)
            results["wall_s"] = time.monotonic() - clock.began
            print(_agreement.markdown(section), flush=True)
            _write_json(path, results)  # after every workload: a run cut short keeps them
    finally:
        clock.prefix = ""
        if not args.keep_data:
            _cleanup(workloads)
    clock.say(f"results: {path}")
    return 1 if any("error" in s for s in results["workloads"]) else 0


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _write_json(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def _versions() -> dict[str, str]:
    return {
        "autotune": autotune.__version__,
        "torch": torch.__version__,
        "optuna": optuna.__version__,
        "python": platform.python_version(),
    }


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
