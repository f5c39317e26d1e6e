"""``benchmarks/RESULTS.md``: the current verdict of every suite, generated from the
results files beside it and from nothing else.

For each suite the page takes each workload's newest results (by the date and time in
the file's name, then the time the run started; a workload's failed run does not hide
its last measured one) and prints the suite's summary table and its misses, the suite
with the newest results first. It is written again whole by every ``suite`` run and by
``python -m benchmarks page``, so nothing written by hand belongs in it: the judgements
of earlier commits live in ``docs/benchmark-history.md``, which no command writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.agreement._summary import summary as agreement_summary
from benchmarks.common._flags import RESULTS_DIR
from benchmarks.generalise._peer_report import side_by_side
from benchmarks.generalise._report import MODES as GENERALISE_MODES
from benchmarks.generalise._report import departures, targets_table, times_lines
from benchmarks.online._check import summary as online_summary
from benchmarks.suite._report import verdict_summary

PAGE = Path(__file__).parent / "RESULTS.md"
"""The page the README links to."""
HISTORY = Path(__file__).parents[1] / "docs" / "benchmark-history.md"
"""The hand-written history: linked from the page, never written by it."""
MAX_LINES = 300
"""A page read in a minute: the summaries only, every figure one link away."""

Summary = Callable[[Sequence[Mapping[str, Any]]], list[str]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Suite:
    """What the page reads of one suite's results files, and how it sums them up."""

    command: str
    """The subcommand that writes the files."""
    title: str
    pattern: str
    """The files' names in the results folder (a glob)."""
    modes: tuple[str, ...]
    """The ``mode`` a file of this suite records."""
    summary: Summary


def _generalise_lines(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    return [*targets_table(sections), *times_lines(sections), *side_by_side(sections)]


def _online_lines(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    return online_summary(sections).splitlines()


SUITES = (
    Suite(
        command="generalise",
        title="The choice against the checker's grid",
        pattern="generalise-*.json",
        modes=GENERALISE_MODES,
        summary=_generalise_lines,
    ),
    Suite(
        command="agreement",
        title="The probe against a plain loop",
        pattern="agreement-*.json",
        modes=("agreement",),
        summary=agreement_summary,
    ),
    Suite(
        command="online",
        title="The online loader in one epoch",
        pattern="online-*.json",
        modes=("online",),
        summary=_online_lines,
    ),
    Suite(
        command="suite",
        title="Every strategy against the oracle",
        pattern="[0-9][0-9][0-9][0-9]-*.json",
        modes=("full", "quick"),
        summary=verdict_summary,
    ),
)

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})(?:-(\d{4}))?")
"""The date (and the time, to the minute) that a results file's name carries."""


@dataclasses.dataclass(frozen=True)
class _File:
    path: Path
    results: dict[str, Any]

    def rank(self) -> tuple[str, str, str, str]:
        """Later is newer: the date and time in the name (a clone's files all have the
        checkout's time), then when the run started; undated names first."""
        found = _DATE.search(self.path.name)
        date, time = (found.group(1), found.group(2) or "") if found else ("", "")
        return date, time, str(self.results.get("started", "")), self.path.name


def _files(results: Path, suite: Suite) -> list[_File]:
    """The suite's results files in ``results``, oldest first; a file that is not JSON of
    this suite (a tool's output under a like name) is not one of them."""
    found = []
    for path in results.glob(suite.pattern):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("mode") in suite.modes:
            found.append(_File(path, data))
    return sorted(found, key=_File.rank)


def newest_sections(files: Sequence[_File]) -> list[tuple[_File, dict[str, Any]]]:
    """Each workload's newest section among ``files`` (oldest first), with its file: the
    newest measured one, or the newest failure when none was measured; in the order the
    newest file that has the workload lists them."""
    chosen: dict[str, tuple[_File, dict[str, Any]]] = {}
    for file in files:
        for section in file.results.get("workloads", []):
            earlier = chosen.get(section["name"])
            if "error" not in section or earlier is None or "error" in earlier[1]:
                chosen[section["name"]] = (file, section)
    order = {file.path: i for i, file in enumerate(files)}

    def place(pair: tuple[_File, dict[str, Any]]) -> tuple[int, int]:
        file, section = pair
        return -order[file.path], file.results["workloads"].index(section)

    return sorted(chosen.values(), key=place)


def _link(file: _File, start: Path) -> str:
    """The file's markdown beside it where there is one, else the JSON, as a link."""
    shown = file.path.with_suffix(".md")
    shown = shown if shown.exists() else file.path
    target = os.path.relpath(shown.resolve(), start.resolve())
    return f"[{shown.name}]({Path(target).as_posix()})"


def _source(file: _File, names: Sequence[str], start: Path) -> str:
    results = file.results
    machine = results.get("machine", {})
    where = f"{machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')})"
    departed = ""
    if results.get("mode") in GENERALISE_MODES and results.get("options"):
        found = departures(results["options"])
        departed = f" Not the benchmark's protocol: {'; '.join(found)}." if found else ""
    return (
        f"- {_link(file, start)}: {', '.join(names)}; started {results.get('started', '?')} "
        f"on {results.get('host', '?')}, {where}, {_commits(results)}.{departed}"
    )


def _commit(run: Mapping[str, Any]) -> str:
    commit = (run.get("commit") or "")[:7] or "an unknown commit"
    return commit + (" with local changes" if run.get("dirty") else "")


def _commits(results: Mapping[str, Any]) -> str:
    """The commit the figures are from; for a run judged again (``--rejudge``), the
    searches' commits and then the one that measured the final rounds."""
    if not results.get("rejudged_from"):
        return f"autotune at {_commit(results)}"
    searched = ", ".join(sorted({_commit(run) for run in results["rejudged_from"]}))
    return f"searches at {searched}, judged again at {_commit(results)}"


def _misses(sections: Sequence[Mapping[str, Any]]) -> list[str]:
    """The workloads that failed to run and the verdicts that failed, a line each, with
    what the suite says of the miss."""
    lines = []
    for section in sections:
        if "error" in section:
            lines.append(f"- {section['name']}: FAILED: {section['error']}")
        device = (section.get("simulated_device") or {}).get("verdict")
        for verdict in [*section.get("verdicts", []), *([device] if device else [])]:
            if not verdict["passed"]:
                detail = f"; {verdict['detail']}" if verdict.get("detail") else ""
                lines.append(
                    f"- {section['name']}: {verdict['target']}: {verdict['figure']:.3f} "
                    f"(bound {verdict['bound']:g}){detail}"
                )
    return lines


def _suite_lines(
    suite: Suite, chosen: list[tuple[_File, dict[str, Any]]], start: Path
) -> list[str]:
    sections = [section for _, section in chosen]
    by_file: dict[Path, tuple[_File, list[str]]] = {}
    for file, section in chosen:
        by_file.setdefault(file.path, (file, []))[1].append(section["name"])
    lines = [f"## {suite.title} (`python -m benchmarks {suite.command}`)", "", "From:", ""]
    lines += [_source(file, names, start) for file, names in by_file.values()]
    lines += ["", *suite.summary(sections)]
    misses = _misses(sections)
    if misses:
        lines += ["", "Misses:", "", *misses]
    return [*lines, ""]


def render(results: Path, start: Path) -> str:
    """The page for the results files in ``results``, its links relative to ``start``
    (the folder the page is written to).

    Raises:
        ValueError: the page would run past :data:`MAX_LINES` (the summaries have grown
            into a report; say less in them).
    """
    history = os.path.relpath(HISTORY.resolve(), start.resolve())
    lines = [
        "# Benchmark results",
        "",
        "<!-- Generated by `python -m benchmarks page` from the results files; every "
        "`suite` run writes it again. Do not edit. -->",
        "",
        "The current verdict of each suite, from each workload's newest results in "
        f"[results/]({Path(os.path.relpath(results.resolve(), start.resolve())).as_posix()}),"
        " the newest first. What is measured and how: [README.md](README.md). The judgements "
        f"of each commit, the misses and their causes: [the history]({Path(history).as_posix()}).",
        "",
    ]
    found = []
    for suite in SUITES:
        chosen = newest_sections(_files(results, suite))
        if chosen:
            newest = max(file.rank() for file, _ in chosen)
            found.append((newest, suite, chosen))
    for _, suite, chosen in sorted(found, key=lambda item: item[0], reverse=True):
        lines += _suite_lines(suite, chosen, start)
    if not found:
        lines += [f"No results files in {results}.", ""]
    page = "\n".join(lines).rstrip("\n") + "\n"
    count = page.count("\n")
    if count > MAX_LINES:
        raise ValueError(f"the results page would be {count} lines; expected at most {MAX_LINES}.")
    return page


def write(results: Path, page: Path = PAGE) -> Path:
    """Write the page for ``results`` to ``page``; returns ``page``."""
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(results, page.parent))
    return page


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m benchmarks page``."""
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="the results folder to read (default benchmarks/results)",
    )
    parser.add_argument(
        "--out", type=Path, default=PAGE, help="the page to write (default benchmarks/RESULTS.md)"
    )


def main(args: argparse.Namespace) -> int:
    """Write the page; returns the exit code (2 when the results folder does not exist)."""
    if not args.results.is_dir():
        print(f"python -m benchmarks: --results {args.results}: no such folder.", file=sys.stderr)
        return 2
    print(f"written: {write(args.results, args.out)}", file=sys.stderr)
    return 0
