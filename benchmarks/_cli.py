"""The command line of the suite.

    python -m benchmarks [--quick] [--workloads NAME,...|all] [--rounds N] [--seed N]
                         [--out DIR] [--summary PATH | --no-summary] [--keep-data]
    python -m benchmarks --agreement [--workloads NAME,...] [--rounds N] [--seconds S]
                         [--warmup S] [--trials N] [--study-dir DIR | --from-studies DIR]
                         [--seed N] [--out PATH] [--keep-data]
    python -m benchmarks --online [--workloads NAME,...] [--rounds N] [--seconds S]
                         [--warmup S] [--grid JSON] [--epoch-scale F] [--seed N]
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

``--online`` (or ``online`` as the first word) times one epoch from a cold start of the
default loader, the best static config of a grid and ``autotune.online``
(:mod:`benchmarks._online`), written to ``PATH`` (a ``.json`` file, or a folder for
``online-<date>.json``) and the same name with ``.md``.

``--generalise`` (or ``generalise`` as the first word) runs the generalisation benchmark
instead (:mod:`benchmarks._generalise_cli`): searches of every workload judged by the
plain loop on a grid, written to ``PATH`` (a ``.json`` file, or a folder for
``generalise-<date>-<time>.json``) with its markdown and plot beside it.

Each mode refuses the flags of the others that do not apply to it (``_ONLY``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune import SpaceError
from autotune.machine._machine import Machine, detect_machine
from benchmarks import _agreement, _generalise, _generalise_cli, _online, _report
from benchmarks._run import run_workload
from benchmarks._runs import FORMAT, Check, Clock, cleanup, git, given, host, run_check, versions
from benchmarks._workloads import (
    WORKLOADS,
    find,
    full_profile,
    quick_profile,
)

HERE = Path(__file__).parent


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
        "--seed",
        type=int,
        default=0,
        help="seeds autotune's sampler and every probe (--generalise: the plain loop's data "
        "order; its searches are seeded 1..N)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE / "results",
        help="folder for <date>-<host>.json and .md (the other modes: a .json file, or a "
        "folder for agreement-<date>.json, online-<date>.json, generalise-<date>-<time>.json)",
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
    _online_arguments(parser)
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
        "--trials",
        type=int,
        help="autotune's exploration trials (default: its own; also --generalise)",
    )
    group.add_argument(
        "--seconds",
        type=float,
        help="timed part of one measurement (--agreement: by the probe and by the plain loop, "
        "default as long as a confirming round's probe, 4.5 s; --online, --generalise: of the "
        "plain loop, default 1.5)",
    )
    group.add_argument(
        "--warmup",
        type=float,
        help="untimed training before it (default 0.5; also --online, --generalise)",
    )
    group.add_argument(
        "--study-dir",
        type=Path,
        help="keep the searches' studies here (default: not kept; also --generalise)",
    )
    group.add_argument(
        "--from-studies",
        type=Path,
        help="read each workload's search from the newest study a run with --study-dir kept "
        "in DIR, instead of searching again",
    )


def _online_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "online",
        "one epoch from a cold start: the default loader, the best static config of a grid "
        "(timed by the plain loop) and autotune.online, in rotating rounds (also: python -m "
        f"benchmarks online ...); --workloads defaults to {', '.join(_online.DEFAULT_WORKLOADS)}"
        f", --rounds to {_online.DEFAULT_ROUNDS}",
    )
    group.add_argument(
        "--online", action="store_true", help="run the online comparison instead of the suite"
    )
    group.add_argument(
        "--grid",
        help="--online: the static grid's loader knobs as a JSON space dict, over the default "
        "(num_workers 0 and doubling to the online bound, prefetch 2-8, not persistent), e.g. "
        '\'{"num_workers": [0, 4], "prefetch_factor": 2, "persistent_workers": false}\'; '
        f"--generalise: {_generalise_cli.GRID_HELP}",
    )
    group.add_argument(
        "--epoch-scale",
        type=float,
        help="multiply every workload's epoch length (default 1: 10-40 s with the default loader)",
    )


_MODES = ("agreement", "online", "generalise")
"""The modes besides the suite: each a flag, or the first word of the command line."""
_ONLY: dict[str, tuple[str, ...]] = {
    "trials": ("agreement", "generalise"),
    "study_dir": ("agreement", "generalise"),
    "from_studies": ("agreement",),
    "seconds": ("agreement", "online", "generalise"),
    "warmup": ("agreement", "online", "generalise"),
    "grid": ("online", "generalise"),
    "epoch_scale": ("online",),
    "seeds": ("generalise",),
    "merge": ("generalise",),
    "rejudge": ("generalise",),
    "final_rounds": ("generalise",),
}
"""The flags of the other modes, and the modes they apply to."""
_INSTEAD_OF_QUICK = {
    "agreement": "--rounds and --seconds",
    "online": "--rounds and --seconds",
    "generalise": "--grid small, --seeds and --seconds",
}
"""What shortens a mode's run, as --quick shortens the suite's."""
_LEAST_ROUNDS = {"generalise": _generalise.MIN_ROUNDS}
"""The modes that need more than one round, and how many."""


def _mode_word(argv: Sequence[str]) -> list[str]:
    """The words, a mode given as the first (``agreement ...``) turned into its flag."""
    words = list(argv)
    if words and words[0] in _MODES:
        words[0] = "--" + words[0]
    return words


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (or the agreement check, the online comparison or the generalisation
    benchmark); returns the exit code (1 when a workload failed to run, 2 for wrong
    arguments)."""
    args = _parser().parse_args(_mode_word(sys.argv[1:] if argv is None else argv))
    problem = _misplaced(args) or _counts_problem(args)
    if problem:
        print(f"python -m benchmarks: {problem}", file=sys.stderr)
        return 2
    runs = {
        "agreement": _agreement_main,
        "online": _online_main,
        "generalise": _generalise_cli.main,
        "suite": _suite_main,
    }
    return runs[_mode(args)](args)


def _suite_main(args: argparse.Namespace) -> int:
    """The suite: every strategy on every workload, re-measured side by side."""
    try:
        workloads = find([n.strip() for n in args.workloads.split(",") if n.strip()])
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
            cleanup(workloads)
    json_path, md_path = write()
    clock.say(f"results: {json_path} and {md_path}" + (f"; {summary}" if summary else ""))
    return 1 if any("error" in s for s in sections) else 0


def _mode(args: argparse.Namespace) -> str:
    return next((mode for mode in _MODES if getattr(args, mode)), "suite")


def _misplaced(args: argparse.Namespace) -> str | None:
    """A flag given to a mode it does not apply to."""
    modes = [f"--{mode}" for mode in _MODES if getattr(args, mode)]
    if len(modes) > 1:
        named = f"{', '.join(modes[:-1])} and {modes[-1]}"
        return f"{named} are {('two', 'three')[len(modes) - 2]} modes; give one."
    mode = _mode(args)
    if mode != "suite" and args.quick:
        return f"--quick does not apply to --{mode} (use {_INSTEAD_OF_QUICK[mode]})."
    if mode != "suite" and args.no_summary:
        return f"--no-summary does not apply to --{mode} (it writes no summary page)."
    given = [
        f"--{name.replace('_', '-')} (only with {' or '.join('--' + m for m in modes)})"
        for name, modes in _ONLY.items()
        if getattr(args, name) is not None and mode not in modes
    ]
    if given:
        return f"not for {'the suite' if mode == 'suite' else '--' + mode}: {', '.join(given)}."
    return None


def _counts_problem(args: argparse.Namespace) -> str | None:
    """A count or a duration out of range."""
    least = {"rounds": _LEAST_ROUNDS.get(_mode(args), 1), "trials": 1, "seeds": 1}
    for name, fewest in least.items():
        value = getattr(args, name)
        if value is not None and value < fewest:
            return f"--{name} is {value}; expected >= {fewest}."
    if args.seconds is not None and args.seconds <= 0:
        return f"--seconds is {args.seconds}; expected > 0."
    if args.warmup is not None and args.warmup < 0:
        return f"--warmup is {args.warmup}; expected >= 0."
    if args.epoch_scale is not None and args.epoch_scale <= 0:
        return f"--epoch-scale is {args.epoch_scale}; expected > 0."
    return None


def _agreement_main(args: argparse.Namespace) -> int:
    """The agreement check: search, then the plain loop, per workload."""
    try:
        workloads = find([n.strip() for n in args.workloads.split(",") if n.strip()], every=True)
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


def _online_main(args: argparse.Namespace) -> int:
    """The online comparison: the grid, then one epoch of each loader, per workload."""
    machine = detect_machine()
    try:
        workloads = _online.online_workloads(
            [n.strip() for n in args.workloads.split(",") if n.strip()]
        )
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
    if text in _generalise.NAMED_GRIDS:
        raise ValueError(f"--grid {text} is for --generalise; --online takes a JSON object.")
    try:
        grid = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--grid is not JSON ({error}): {text!r}") from None
    if not isinstance(grid, dict):
        raise ValueError(f"--grid is {text!r}; expected a JSON object of knobs and values.")
    _online.grid_configs(grid, machine, batch_size=1)
    return grid


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
