"""The final comparison: every chosen config measured again, interleaved.

Rounds of A B C ..., ... C B A, A B C ...: each round measures every entry once,
so a machine that drifts between rounds (another job starts, the CPU heats up)
moves all entries alike, and the order turns every other round, so a drift within
a round favours no entry; each entry's figure is the median of its rounds.
Configs chosen by several strategies are measured once and shared.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from autotune import Settings
from autotune._noise import relative_range
from autotune.probe import Mode
from benchmarks.common._checker import round_order
from benchmarks.suite._harness import Harness


@dataclasses.dataclass(frozen=True, kw_only=True)
class Entry:
    """One thing to re-measure: a config, in a mode, on a workload's harness."""

    label: str
    settings: Settings
    mode: Mode
    harness: Harness

    def key(self) -> tuple[str, str, str]:
        return (str(self.harness.config), self.mode, self.settings.key())


def distinct(entries: Sequence[Entry]) -> list[Entry]:
    """One entry per (workload, mode, config), in order of first appearance."""
    seen: dict[tuple[str, str, str], Entry] = {}
    for entry in entries:
        seen.setdefault(entry.key(), entry)
    return list(seen.values())


def interleave(
    entries: Sequence[Entry], rounds: int, measure: Callable[[Entry, int], float]
) -> dict[tuple[str, str, str], list[float]]:
    """``rounds`` rounds, each measuring every distinct entry once in the order of
    :func:`benchmarks.common._checker.round_order`; returns each entry's figures by its key."""
    unique = distinct(entries)
    figures: dict[tuple[str, str, str], list[float]] = {e.key(): [] for e in unique}
    for round_number in range(1, rounds + 1):
        for index in round_order(len(unique), round_number):
            entry = unique[index]
            figures[entry.key()].append(measure(entry, round_number))
    return figures


def median(values: Sequence[float]) -> float:
    """The median, 0 for no values (a config that never ran)."""
    return statistics.median(values) if values else 0.0


def spread(values: Sequence[float]) -> float:
    """:func:`autotune._noise.relative_range` of the rounds: how much the figure moved
    between rounds; 0 for fewer than two rounds or a median that is not positive."""
    return relative_range(values) or 0.0


def measure_entry(entry: Entry, round_number: int) -> float:
    """Measure one entry through its harness (the production ``measure`` of interleave)."""
    label = f"round {round_number}: {entry.label}"
    return entry.harness.measure(entry.settings, entry.mode, label).samples_per_s
