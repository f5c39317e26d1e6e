"""The command line: a thin layer over the library.

    autotune search CONFIG [--dry-run] [--device DEVICE] [SEARCH OPTION FLAGS] [--debug]
    autotune show STUDY [--json]
    autotune export STUDY [-o settings.json]
    autotune report STUDY [-o report.html] [--format html|md]

A user's mistake is one line on stderr and exit code 2; ``--debug`` adds the
traceback. Ctrl-C exits with 130 and keeps every finished trial.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args, get_type_hints

from autotune._errors import AutotuneError, FingerprintWarning

if TYPE_CHECKING:
    from autotune.result import SearchResult
    from autotune.study import StudyLocation

_STUDY_HELP = "a study name, a .db path, or a storage URL (postgresql://USER:PASS@HOST/DB)"

SEARCH_EXAMPLES = """examples:
  autotune search examples/quickstart.py                 tune, print the best, save the study
  autotune search examples/quickstart.py --dry-run       the space, budget and time, no trial
  autotune search train.py --trials 48 --seed 0          a longer, repeatable search
  autotune search train.py --budget 2m                   plan the stages to fit two minutes
  autotune search train.py --study runs/a.db --resume    continue a saved study
  autotune search train.py --gpus 0,1                    tune DDP ranks on two GPUs
  autotune search train.py --window-seconds 1.0 --tolerance 0.05   a noisy machine
  autotune search train.py --backend ray --address auto           trials on a Ray cluster
"""

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 1
EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command killed by SIGPIPE (128 + 13), as `head` expects."""

SEARCH_FLAGS: dict[str, dict[str, Any]] = {
    "trials": {},
    "timeout": {},
    "budget": {"type": str, "metavar": "TIME"},
    "study": {"metavar": "PATH|URL"},
    "study_name": {"metavar": "NAME"},
    "seed": {},
    "resume": {},
    "warm_from": {"type": str, "action": "append", "metavar": "STUDY"},
    "gpus": {"type": str},
    "ranks": {},
    "backend": {},
    "address": {"metavar": "auto|HOST:PORT"},
    "concurrent": {"metavar": "N"},
    "tolerance": {"metavar": "FRACTION"},
    "memory_limit": {"type": str, "metavar": "BYTES"},
    "window_seconds": {"metavar": "S"},
    "max_windows": {"metavar": "N"},
    "rounds": {"metavar": "N"},
    "runoff_rounds": {"metavar": "N"},
}
"""The SearchOptions fields that ``autotune search`` takes as flags (``--max-windows`` for
``max_windows``), with the argparse keywords their type does not give: a value the command
line reads as text (``"4GiB"``, ``"0,1"``, ``"1m30s"``) or a shorter metavar. The help, the
type, the choices and the default come from the field itself."""

CONFIG_ONLY: dict[str, str] = {
    "min_windows": "it places ASHA's rungs with reduction_factor and max_windows, which are "
    "changed together, in a config",
    "reduction_factor": "it places ASHA's rungs with min_windows and max_windows, which are "
    "changed together, in a config",
    "warmup_seconds": "it stretches itself over the batches the workers queue while starting, "
    "so it rarely needs changing",
    "trial_timeout": "how slowly a loader may start is a property of the workload, set beside "
    "it in its config",
    "finalists": "the confirming stage widens the finalists by the noise it measures; --rounds "
    "and --runoff-rounds are the flags for a surer verdict",
    "bounds": "a saving of the search, on by default; benchmarks and tests turn it off in "
    "their configs",
    "ceilings": "what the diagnosis reads, on by default; benchmarks and tests turn it off in "
    "their configs",
    "ddp_finalists": "a detail of the DDP stage, set beside the ranks in a config",
    "ddp_knobs": "a detail of the DDP stage, set beside the ranks in a config",
}
"""The SearchOptions fields without a flag, each with the reason: the config's
``search = {...}`` sets them."""


def flag_name(field: str) -> str:
    """The command-line flag of a SearchOptions field: ``max_windows`` -> ``--max-windows``."""
    return "--" + field.replace("_", "-")


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """Add a flag for each field in SEARCH_FLAGS, its help the first line of the field's
    docstring and its default the field's, so that ``--help`` cannot drift from the code.

    A flag not given is None, which SearchOptions.from_mapping reads as "keep the config's
    value".
    """
    from autotune import SearchOptions

    fields = {field.name: field for field in dataclasses.fields(SearchOptions)}
    types = get_type_hints(SearchOptions)
    docs = SearchOptions.field_docs()
    for name, extra in SEARCH_FLAGS.items():
        field = fields[name]
        keywords: dict[str, Any] = {"help": _flag_help(docs[name], field.default)}
        value_type = extra["type"] if "type" in extra else _flag_type(name, types[name])
        if value_type is bool:
            keywords.update(action="store_true", default=None)
        else:
            keywords["type"] = value_type
        if "choices" in field.metadata:
            keywords["choices"] = field.metadata["choices"]
        keywords.update({key: value for key, value in extra.items() if key != "type"})
        parser.add_argument(flag_name(name), **keywords)


def _flag_type(name: str, annotation: Any) -> type:
    """The one type a field's annotation admits besides None: int, float, str or bool."""
    admitted = [arg for arg in get_args(annotation) if arg is not type(None)]
    single = admitted[0] if len(admitted) == 1 else annotation
    if single not in (int, float, str, bool):
        raise TypeError(
            f"search option {name} is {annotation}; a flag needs int, float, str or bool "
            'alone (or None): give its "type" in SEARCH_FLAGS.'
        )
    return cast(type, single)


def _flag_help(doc: str, default: Any) -> str:
    """A field docstring's first line as argparse help: lower case, no full stop, the
    default after it; ``%`` doubled, as argparse formats help with it."""
    summary = doc.splitlines()[0].rstrip(".")
    first = summary.split(" ", 1)[0]
    if not (len(first) > 1 and first.isupper()):
        summary = summary[0].lower() + summary[1:]
    if default is not None and default is not False and default is not dataclasses.MISSING:
        summary += f" (default {default})"
    return summary.replace("%", "%%")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autotune",
        description="Measure, don't guess, the DataLoader settings of a PyTorch training.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    search = _add_search(commands)
    readers = _add_study_readers(commands)
    for sub in readers:
        sub.add_argument(
            "--study-name",
            metavar="NAME",
            help="the study's name in a storage that holds several (default: its only one)",
        )
    for sub in (search, *readers):
        sub.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def _add_search(commands: Any) -> argparse.ArgumentParser:
    """The ``search`` command: a config, the search options as flags, a dry run."""
    search: argparse.ArgumentParser = commands.add_parser(
        "search",
        help="tune a config and save the study",
        description="Tune the DataLoader settings of a config by measuring short real "
        "trainings, and save the study. Flags win over the config's search = {...}.",
        epilog=SEARCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    search.add_argument("config", help="the config file (a Python module)")
    search.add_argument(
        "--dry-run",
        action="store_true",
        help="print the space, the knobs left out and why, the budget and an estimated "
        "time; run nothing",
    )
    _add_option_flags(search)
    search.add_argument(
        "--device", help="the device to train on: cpu, cuda, cuda:1 (default: the config's)"
    )
    return search


def _add_study_readers(commands: Any) -> tuple[argparse.ArgumentParser, ...]:
    """The commands that read a saved study: ``show``, ``export`` and ``report``."""
    show = commands.add_parser("show", help="the best settings and the trials of a study")
    show.add_argument("study", help=_STUDY_HELP)
    show.add_argument(
        "--json",
        action="store_true",
        help="print the chosen settings, the confirmed figures with their intervals, the "
        "default's figures and the diagnosis as JSON, for scripts",
    )

    export = commands.add_parser("export", help="the best settings of a study as JSON")
    export.add_argument("study", help=_STUDY_HELP)
    export.add_argument("-o", "--output", help="write to this file instead of stdout")

    report = commands.add_parser(
        "report", help="the diagnosis, plots and trials of a study as HTML or Markdown"
    )
    report.add_argument("study", help=_STUDY_HELP)
    report.add_argument(
        "-o",
        "--output",
        help="write to this file ('-' for stdout; default: the study's path with .html for "
        "HTML, stdout for Markdown)",
    )
    report.add_argument(
        "--format", choices=("html", "md"), default="html", help="html (with plots) or md"
    )
    return show, export, report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args = _parser().parse_args(argv)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "search": _search,
        "show": _show,
        "export": _export,
        "report": _report,
    }
    try:
        return handlers[args.command](args)
    except BrokenPipeError:
        # The reader went away (`autotune show study.db | head`): nothing left to say.
        # Point stdout at /dev/null so that flushing it at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except AutotuneError as error:
        if args.debug:
            traceback.print_exc()
        print(f"autotune: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(
            "autotune: interrupted; every finished trial is kept in the study. Run the same "
            "command again (or add --resume) to continue.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as error:
        if args.debug:
            traceback.print_exc()
        print(
            f"autotune: internal error: {type(error).__name__}: {error} "
            "(this is a bug in autotune; run with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _search(args: argparse.Namespace) -> int:
    from autotune.decide import diagnose
    from autotune.output import code_lines, diagnosis_lines, result_lines
    from autotune.pipeline import search
    from autotune.progress import make_progress

    # A repeated flag (--warm-from A --warm-from B) arrives as a list: its option's tuple.
    options: dict[str, Any] = {
        name: tuple(value) if isinstance(value := getattr(args, name), list) else value
        for name in SEARCH_FLAGS
    }
    if args.dry_run:
        from autotune.pipeline import dry_run

        print("\n".join(dry_run(args.config, device=args.device, **options)))
        return 0
    with make_progress() as progress:
        result = search(args.config, progress=progress, device=args.device, **options)
    print("\n".join(result_lines(result)))
    print("\n".join(diagnosis_lines(diagnose(result))))
    print(f"study: {result.study_path}  (autotune report {result.study_path} for the plots)")
    print()
    print("\n".join(code_lines(result)))
    return 0


def _show(args: argparse.Namespace) -> int:
    from autotune.decide import diagnose
    from autotune.output import (
        counts_line,
        diagnosis_lines,
        result_lines,
        result_of,
        show_json,
        start_lines,
        trials_table,
    )
    from autotune.study import Attr, open_study, read_meta, records

    where = _where(args)
    study = open_study(where, create=False)
    read_meta(study)  # refuses a study this version cannot read
    trials = records(study)
    try:
        result: SearchResult | None = result_of(study, where=where)
        error = None
    except AutotuneError as failure:
        result, error = None, str(failure)
    diagnoses = diagnose(result) if result is not None else []
    if result is not None:
        _warn_if_moved(result)
    starts = list(study.user_attrs.get(Attr.STARTS) or [])
    if args.json:
        data: dict[str, Any] = {"study": {"name": study.study_name, "path": str(where)}}
        data.update(show_json(result, diagnoses, error))
        data["starts"] = starts
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    print(f"study {study.study_name!r} in {where}: {counts_line(trials)}")
    for line in start_lines(starts):
        print(line)
    if result is not None:
        print("\n".join(result_lines(result)))
        print("\n".join(diagnosis_lines(diagnoses)))
    else:
        print(f"no settings chosen yet: {error}")
    print()
    print("\n".join(trials_table(trials)))
    return 0


def _export(args: argparse.Namespace) -> int:
    from autotune.output import result_of
    from autotune.study import open_study

    where = _where(args)
    result = result_of(open_study(where, create=False), where=where)
    _warn_if_moved(result)
    text = json.dumps(result.to_dict(), indent=2, sort_keys=True)
    if args.output:
        Path(args.output).write_text(text + "\n")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def _report(args: argparse.Namespace) -> int:
    from autotune.output import report

    where = _where(args)
    output = args.output
    if output is None and args.format == "html":
        # A database has no file to put the report beside: it goes to NAME.html here.
        output = str(
            where.path.with_suffix(".html") if where.path else f"{where.name or 'study'}.html"
        )
    if output is None or output == "-":
        sys.stdout.write(report(where, format=args.format))
        return 0
    report(where, output, format=args.format)
    print(f"wrote {output}", file=sys.stderr)
    return 0


def _where(args: argparse.Namespace) -> StudyLocation:
    """The study that ``show``, ``export`` and ``report`` read: a path or a URL, and the
    name given with ``--study-name``."""
    from autotune.study import locate

    return locate(args.study, None, name=args.study_name)


def _warn_if_moved(result: SearchResult) -> None:
    """One line on stderr when this machine differs from the one the settings were tuned
    on; the settings are shown all the same."""
    from autotune.output import warn_if_moved

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FingerprintWarning)
        warn_if_moved(result)
    for warning in caught:
        print(f"autotune: warning: {warning.message}", file=sys.stderr)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
