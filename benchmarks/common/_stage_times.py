"""A search's wall time by stage, as the suites record it (``SearchTime.to_dict``, the
search's own clock) and as the pages print it beside the search's quality.

Plain dicts only, so that the pages load nothing of the probe to print them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

TOTAL = "search"
"""The column of the whole search: its stages, the setup before the preflight and all."""
ORDER = (
    "preflight",
    "bounds",
    "workers",
    "recheck",
    "early",
    "explore",
    "confirm",
    "runoff",
    "ddp",
)
"""The stages in the order a search runs them (the ceilings last, after any other), so
the columns read as a search goes whichever workload first ran a stage."""


@dataclasses.dataclass(frozen=True)
class TimedRow:
    """One workload's searches, for the table."""

    workload: str
    quality: str
    """The cell that says how good the searches' choices were."""
    times: Sequence[Mapping[str, Any]]
    """Each search's recorded time (``SearchTime.to_dict``)."""


def mean_times(times: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The mean seconds of each stage over ``times``, a stage a search skipped counting
    0 s (so that the stages add up as the searches' do), and of the whole search under
    :data:`TOTAL`; the stages in the order they first ran."""
    if not times:
        return {}
    sums: dict[str, float] = {TOTAL: 0.0}
    for kept in times:
        sums[TOTAL] += kept["total_s"]
        for stage, seconds in kept["stages"]:
            sums[stage] = sums.get(stage, 0.0) + seconds
    return {stage: total / len(times) for stage, total in sums.items()}


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 9.95 else f"{value:.0f}"


def times_table(rows: Sequence[TimedRow], quality: str) -> list[str]:
    """A markdown table, a row per workload whose searches recorded their time: the
    ``quality`` column, the mean search in seconds, and each stage any search ran; empty
    when none recorded it (results from before the time was kept)."""
    timed = [(row, mean_times(row.times)) for row in rows if row.times]
    if not timed:
        return []
    stages: list[str] = []
    for _, means in timed:
        stages += [stage for stage in means if stage != TOTAL and stage not in stages]
    stages.sort(key=lambda stage: ORDER.index(stage) if stage in ORDER else len(ORDER))
    header = f"| workload | {quality} | {TOTAL} s | " + " | ".join(stages) + " |"
    lines = [header, "|" + " --- |" * (len(stages) + 3)]
    for row, means in timed:
        cells = [row.workload, row.quality, _seconds(means[TOTAL])]
        cells += [_seconds(means.get(stage)) for stage in stages]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
