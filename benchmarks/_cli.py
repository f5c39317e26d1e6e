"""The command line: one subcommand per suite, and ``page``.

    python -m benchmarks suite [--quick] ...      every strategy on every workload
    python -m benchmarks agreement ...            the probe beside a plain training loop
    python -m benchmarks online ...               the online loader in one epoch
    python -m benchmarks generalise ...           searches judged by the plain loop's grid
    python -m benchmarks page                     write RESULTS.md from the results files

``python -m benchmarks`` alone prints this list and runs nothing: a full suite run takes
hours and rewrites ``RESULTS.md``, which no one should start by accident.
``python -m benchmarks SUITE --help`` lists a suite's flags. Progress goes to stderr,
one table per workload to stdout.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from benchmarks import _page
from benchmarks.agreement import _cli as agreement
from benchmarks.common._flags import counts_problem
from benchmarks.generalise import _check as _generalise
from benchmarks.generalise import _cli as generalise
from benchmarks.online import _cli as online
from benchmarks.suite import _cli as suite

PROG = "python -m benchmarks"


class UsageError(Exception):
    """Flags the parser refuses: said on one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """A parser whose errors the caller prints, so that every refusal reads
    ``python -m benchmarks: ...`` and ``main`` returns 2 instead of exiting."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROG).strip()
        raise UsageError(f"{command}: {message}" if command else message)


AddArguments = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]
_COMMANDS: tuple[tuple[str, str, str, AddArguments, Run], ...] = (
    (
        "suite",
        "every strategy on every workload, against the oracle",
        "How good are the settings autotune finds, and how cheaply: every strategy on "
        "every workload, re-measured side by side. --quick shortens a run.",
        suite.add_arguments,
        suite.main,
    ),
    (
        "agreement",
        "the probe beside a plain training loop",
        agreement.DESCRIPTION,
        agreement.add_arguments,
        agreement.main,
    ),
    (
        "online",
        "the online loader in one epoch",
        online.DESCRIPTION,
        online.add_arguments,
        online.main,
    ),
    (
        "generalise",
        "searches judged by the plain loop on a grid",
        generalise.DESCRIPTION,
        generalise.add_arguments,
        generalise.main,
    ),
    (
        "page",
        "write RESULTS.md from the results files",
        "Write benchmarks/RESULTS.md from the results files (every suite run does too).",
        _page.add_arguments,
        _page.main,
    ),
)
_LEAST_ROUNDS = {"generalise": _generalise.MIN_ROUNDS}
"""The suites that need more than one round, and how many."""


def parser() -> argparse.ArgumentParser:
    """The command line, a subparser per suite."""
    top = _Parser(
        prog=PROG,
        description="The benchmarks of autotune, one subcommand per suite.",
        epilog=f"'{PROG} SUITE --help' lists a suite's flags.",
    )
    commands = top.add_subparsers(dest="command", metavar="SUITE")
    for name, short, description, add_arguments, run in _COMMANDS:
        sub = commands.add_parser(name, help=short, description=description, prog=f"{PROG} {name}")
        add_arguments(sub)
        sub.set_defaults(run=run)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite the command line names; returns the exit code (0: done, 1: a
    workload failed to run, 2: wrong arguments)."""
    words = list(sys.argv[1:] if argv is None else argv)
    top = parser()
    if not words:
        top.print_help()
        return 0
    try:
        if words[0].startswith("-") and words[0] not in ("-h", "--help"):
            raise UsageError(
                f"name the suite first, e.g. '{PROG} suite {' '.join(words)}' "
                f"(suites: {', '.join(name for name, *_ in _COMMANDS)})."
            )
        args, extra = top.parse_known_args(words)
        if extra:
            raise UsageError(f"{args.command}: unrecognized arguments: {' '.join(extra)}")
    except UsageError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    problem = counts_problem(args, least_rounds=_LEAST_ROUNDS.get(args.command, 1))
    if problem:
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    run: Run = args.run
    return run(args)
